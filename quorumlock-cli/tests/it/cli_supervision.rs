//! `quorumlock run` keeps the command's processes within the lock, whatever
//! happens to quorumlock: SIGKILL, SIGSTOP, signals while holding or
//! waiting, Ctrl-Z, orphans and leftover processes; and leaves no key of its
//! own behind on any exit path. Through the built binary, against real
//! redis-server nodes; process state comes from /proc.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use quorumlock_testkit::cli::{
    self, Binary, EXIT_LIMIT, Running, Stat, all_processes, exit, live_members, scratch, stat, wait_until,
};
use quorumlock_testkit::{RedisServer, dbsize, get, leftovers, set_foreign, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// Per-node timeout for the runs: generous for a loaded machine.
const NODE_TIMEOUT: &str = "500ms";

/// How long a command under test has to get going (write its marker file).
const START_LIMIT: Duration = Duration::from_secs(10);

/// How soon after quorumlock is SIGKILLed the command's group must be dead:
/// far below the 5 s ttl of that test, so only the guardian (seeing its pipe
/// close) can have done it, not the lock's expiry.
const KILL_BOUND: Duration = Duration::from_secs(1);

/// Slack after the lock's validity ends for the guardian to kill a stopped
/// quorumlock's command (a loaded machine schedules it late).
const STOP_BOUND: Duration = Duration::from_secs(1);

/// How soon quorumlock must exit after a signal that ends its wait.
const PROMPT: Duration = Duration::from_secs(1);

/// `quorumlock run ARGS` over `nodes`, with the test's node timeout.
fn quorumlock_run(nodes: &[RedisServer], args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(nodes);
    cmd.arg("run").args(["--node-timeout", NODE_TIMEOUT]).args(args);
    cmd
}

/// `script` with each `{name}` replaced by the path of `dir/name`.
fn script(dir: &Path, template: &str, names: &[&str]) -> String {
    names.iter().fold(template.to_owned(), |s, name| {
        s.replace(&format!("{{{name}}}"), &dir.join(name).display().to_string())
    })
}

/// Waits until `path` holds a complete line (the command got that far),
/// at most [`START_LIMIT`].
fn wait_for_line(path: &Path) -> String {
    cli::wait_for_line(path, START_LIMIT)
}

/// Whether process `pid` catches signal `signo` (its handler is installed).
fn catches(pid: u32, signo: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signo - 1)) != 0)
}

fn connected_clients(node: &RedisServer) -> u64 {
    let info = node.command(&["INFO", "clients"]).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients in INFO")
}

/// SIGKILLs quorumlock while `template` runs (it writes its pid, the group
/// id, to `{pgid}`), then checks that the group dies at once and that a
/// second run on the same key never overlaps with it.
fn sigkill_of_quorumlock_ends_the_group(name: &str, template: &str, members: usize) {
    let nodes = start_nodes(3);
    let dir = scratch(name);
    let key = format!("sup:kill:{name}");
    let command = script(&dir, template, &["pgid"]);
    let mut first = Running::spawn(quorumlock_run(
        &nodes,
        &["--key", &key, "--ttl", "5s", "--", "sh", "-c", &command],
    ));
    let pgid: u32 = wait_for_line(&dir.join("pgid")).parse().expect("pid");
    first.group = Some(pgid);
    assert!(
        wait_until(START_LIMIT, || live_members(pgid).len() >= members),
        "the command's group has its {members} processes: {:?}",
        live_members(pgid)
    );

    let killed = Instant::now();
    first.signal("KILL");
    // Takes the lock once the dead run's keys expire; its command looks for
    // any live process of the first group.
    let check = script(
        &dir,
        &format!(
            "cat /proc/[0-9]*/stat 2>/dev/null | awk -v g={pgid} \
             '{{ sub(/.*\\) /, \"\"); if ($3 == g && $1 != \"Z\") n++ }} \
             END {{ print (n ? \"overlap\" : \"clear\") }}' > {{result}}"
        ),
        &["result"],
    );
    let mut second = Running::spawn(quorumlock_run(
        &nodes,
        &[
            "--key", &key, "--ttl", "5s", "--wait", "20s", "--", "sh", "-c", &check,
        ],
    ));
    let dead = wait_until(KILL_BOUND, || live_members(pgid).is_empty());
    let took = killed.elapsed();
    assert!(
        dead,
        "{took:?} after quorumlock's SIGKILL the command's group still runs: {:?}",
        live_members(pgid)
    );
    first.wait(EXIT_LIMIT);

    let status = second.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "second run: {}", second.stderr());
    assert_eq!(
        wait_for_line(&dir.join("result")),
        "clear",
        "the second holder ran while the first one's command was alive"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_of_quorumlock_kills_the_command_within_a_second_and_no_holder_overlaps() {
    sigkill_of_quorumlock_ends_the_group("leader", "echo $$ > {pgid}; sleep 60", 1);
}

#[test]
fn sigkill_of_quorumlock_also_kills_the_commands_grandchildren() {
    // `; :` keeps sh from exec'ing sleep: the group is sh and its child.
    sigkill_of_quorumlock_ends_the_group("grandchild", "echo $$ > {pgid}; sleep 60; :", 2);
}

#[test]
fn sigstop_of_quorumlock_gets_the_group_killed_by_the_end_of_the_validity() {
    let ttl = Duration::from_secs(2);
    let nodes = start_nodes(1);
    let dir = scratch("sigstop");
    let command = script(&dir, "echo $$ > {pgid}; sleep 60; :", &["pgid"]);
    let mut run = Running::spawn(quorumlock_run(
        &nodes,
        &["--key", "sup:stop", "--ttl", "2s", "--", "sh", "-c", &command],
    ));
    let pgid: u32 = wait_for_line(&dir.join("pgid")).parse().expect("pid");
    run.group = Some(pgid);
    let stopped = Instant::now();
    run.signal("STOP");
    // The last renewal started before the stop, so the validity ends at the
    // latest a ttl after it.
    let dead = wait_until(ttl + STOP_BOUND, || live_members(pgid).is_empty());
    let took = stopped.elapsed();
    assert!(
        dead,
        "{took:?} after quorumlock was stopped its command still runs: {:?}",
        live_members(pgid)
    );
    run.signal("CONT");
    let status = run.wait(EXIT_LIMIT);
    let stderr = run.stderr();
    assert_eq!(status.code(), Some(exit::LOST), "{stderr}");
    assert!(stderr.contains("terminated"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_and_sigint_while_holding_return_the_commands_status_and_leave_no_key() {
    let nodes = start_nodes(3);
    let dir = scratch("holding");
    let cases = [
        ("TERM", "echo $$ > {pgid}; exec sleep 60", 128 + 15),
        ("INT", "echo $$ > {pgid}; exec sleep 60", 128 + 2),
        (
            "TERM",
            "trap 'exit 0' TERM; echo $$ > {pgid}; while :; do sleep 0.05; done",
            0,
        ),
    ];
    for (signal_name, template, code) in cases {
        let _ = std::fs::remove_file(dir.join("pgid"));
        let command = script(&dir, template, &["pgid"]);
        let mut run = Running::spawn(quorumlock_run(
            &nodes,
            &["--key", "sup:holding", "--", "sh", "-c", &command],
        ));
        let pgid: u32 = wait_for_line(&dir.join("pgid")).parse().expect("pid");
        run.group = Some(pgid);
        run.signal(signal_name);
        let status = run.wait(EXIT_LIMIT);
        let stderr = run.stderr();
        assert_eq!(
            status.code(),
            Some(code),
            "SIG{signal_name} to {template:?}: {stderr}"
        );
        assert!(
            live_members(pgid).is_empty(),
            "{template:?}: the group outlived quorumlock"
        );
        for node in &nodes {
            assert_eq!(
                dbsize(node),
                0,
                "SIG{signal_name} to {template:?}: a key is left: {}",
                leftovers(node)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_command_that_ignores_sigterm_to_quorumlock_is_killed_after_the_grace_period() {
    let grace = Duration::from_secs(1);
    let nodes = start_nodes(3);
    let dir = scratch("ignores");
    let command = script(&dir, "trap '' TERM; echo $$ > {pgid}; sleep 60", &["pgid"]);
    let mut run = Running::spawn(quorumlock_run(
        &nodes,
        &[
            "--key",
            "sup:ignores",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            &command,
        ],
    ));
    let pgid: u32 = wait_for_line(&dir.join("pgid")).parse().expect("pid");
    run.group = Some(pgid);
    let sent = Instant::now();
    run.signal("TERM");
    let status = run.wait(grace + EXIT_LIMIT);
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(128 + 9), "killed: {}", run.stderr());
    assert!(took >= grace, "SIGKILL came before the grace period: {took:?}");
    assert!(took < grace + Duration::from_secs(3), "took {took:?}");
    assert!(live_members(pgid).is_empty(), "the group outlived quorumlock");
    for node in &nodes {
        assert_eq!(dbsize(node), 0, "{}", leftovers(node));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_while_waiting_for_a_busy_lock_exits_promptly_and_leaves_no_key_of_its_own() {
    let nodes = start_nodes(3);
    let dir = scratch("waiting");
    let key = "sup:waiting";
    let command = script(&dir, "echo $$ > {pgid}; exec sleep 60", &["pgid"]);
    let mut holder = Running::spawn(quorumlock_run(
        &nodes,
        &["--key", key, "--ttl", "10s", "--", "sh", "-c", &command],
    ));
    holder.group = Some(wait_for_line(&dir.join("pgid")).parse().expect("pid"));
    // The lock returned at a majority: the last node's write may still be
    // on its way when the command starts.
    assert!(
        wait_until(START_LIMIT, || nodes.iter().all(|n| get(n, key).is_some())),
        "the holder's key is on every node"
    );
    let tokens: Vec<Option<String>> = nodes.iter().map(|n| get(n, key)).collect();
    let clients = connected_clients(&nodes[0]);

    let mut waiter = Running::spawn(quorumlock_run(
        &nodes,
        &["--key", key, "--wait", "30s", "--", "true"],
    ));
    // Waiting: its handler is installed and it has connected to the nodes.
    assert!(
        wait_until(START_LIMIT, || catches(waiter.pid(), 15)
            && connected_clients(&nodes[0]) > clients),
        "the second run is waiting for the lock"
    );
    let sent = Instant::now();
    waiter.signal("TERM");
    let status = waiter.wait(PROMPT + EXIT_LIMIT);
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(128 + 15), "{}", waiter.stderr());
    assert!(took < PROMPT, "took {took:?} to stop waiting");
    for (node, token) in nodes.iter().zip(&tokens) {
        assert_eq!(
            (dbsize(node), get(node, key)),
            (1, token.clone()),
            "only the holder's key remains: {}",
            leftovers(node)
        );
    }
    holder.signal("TERM");
    assert_eq!(holder.wait(EXIT_LIMIT).code(), Some(128 + 15));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_one_shot_run_leaves_no_key_of_its_own_whichever_nodes_a_foreign_owner_holds() {
    let nodes = start_nodes(5);
    let key = "sup:mask";
    let mut failures = Vec::new();
    for mask in 0u32..32 {
        for node in &nodes {
            assert!(node.command(&["FLUSHALL"]).expect("FLUSHALL").starts_with("+OK"));
        }
        let foreign = |i: usize| mask & (1 << i) != 0;
        for (i, node) in nodes.iter().enumerate() {
            if foreign(i) {
                set_foreign(node, key, "other", 20_000);
            }
        }
        let out = quorumlock_run(&nodes, &["--key", key, "--wait", "0", "--", "true"])
            .output()
            .expect("run quorumlock");
        let expected = if mask.count_ones() >= 3 { exit::BUSY } else { 0 };
        if out.status.code() != Some(expected) {
            failures.push(format!(
                "mask {mask:05b}: exit {:?}, expected {expected}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for (i, node) in nodes.iter().enumerate() {
            let want = foreign(i).then(|| "other".to_owned());
            let keys = dbsize(node);
            if get(node, key) != want || keys != i64::from(want.is_some()) {
                failures.push(format!("mask {mask:05b}, node {i}: {}", leftovers(node)));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn orphans_of_the_command_reparent_to_quorumlock_and_are_reaped() {
    let nodes = start_nodes(1);
    let dir = scratch("orphans");
    // The subshell exits at once, orphaning its background sleep.
    let command = script(&dir, "(sleep 0.5 & echo $! > {orphan}); sleep 3", &["orphan"]);
    let mut run = Running::spawn(quorumlock_run(
        &nodes,
        &["--key", "sup:orphans", "--", "sh", "-c", &command],
    ));
    let orphan: u32 = wait_for_line(&dir.join("orphan")).parse().expect("pid");
    let qpid = run.pid();
    assert!(
        wait_until(START_LIMIT, || stat(orphan).is_some_and(|s| s.ppid == qpid)),
        "the orphan's parent is quorumlock (a subreaper): {:?}",
        stat(orphan)
    );
    assert!(
        wait_until(Duration::from_secs(2), || stat(orphan).is_none()),
        "the orphan was reaped after it exited: {:?}",
        stat(orphan)
    );
    assert!(
        run.child.try_wait().expect("try_wait").is_none(),
        "reaped by quorumlock, which still runs"
    );
    let zombies: Vec<Stat> = all_processes()
        .into_iter()
        .filter(|p| p.ppid == qpid && p.state == 'Z')
        .collect();
    assert!(zombies.is_empty(), "zombies of quorumlock: {zombies:?}");
    assert!(run.wait(EXIT_LIMIT).success(), "{}", run.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_z_stops_the_command_and_quorumlock_and_sigcont_resumes_a_valid_lock() {
    let nodes = start_nodes(1);
    let dir = scratch("ctrl-z");
    let command = script(
        &dir,
        "echo $$ > {pgid}; while [ ! -e {done} ]; do sleep 0.05; done",
        &["pgid", "done"],
    );
    let mut run = Running::spawn(quorumlock_run(
        &nodes,
        &["--key", "sup:tstp", "--", "sh", "-c", &command],
    ));
    let pgid: u32 = wait_for_line(&dir.join("pgid")).parse().expect("pid");
    run.group = Some(pgid);
    let qpid = run.pid();
    let stopped = |pid: u32| stat(pid).is_some_and(|s| s.state == 'T');
    run.signal("TSTP");
    assert!(
        wait_until(START_LIMIT, || stopped(qpid)
            && stopped(pgid)
            && live_members(pgid).iter().all(|p| p.state == 'T')),
        "quorumlock ({:?}) and the command's group ({:?}) are stopped",
        stat(qpid),
        live_members(pgid)
    );
    run.signal("CONT");
    assert!(
        wait_until(START_LIMIT, || !stopped(qpid)
            && live_members(pgid).iter().all(|p| p.state != 'T')),
        "quorumlock ({:?}) continued the command's group ({:?})",
        stat(qpid),
        live_members(pgid)
    );
    std::fs::write(dir.join("done"), "").expect("write done");
    let status = run.wait(EXIT_LIMIT);
    assert_eq!(status.code(), Some(0), "the command ran on: {}", run.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn processes_left_in_the_group_are_terminated_and_the_lock_kept_until_they_are_gone() {
    let grace = Duration::from_secs(1);
    let nodes = start_nodes(1);
    let dir = scratch("leftovers");
    // A background job that ignores SIGTERM outlives the command, which
    // exits once the job has set its trap.
    let command = script(
        &dir,
        "echo $$ > {pgid}; (trap '' TERM; echo > {bg}; sleep 60) & \
         while [ ! -e {bg} ]; do sleep 0.01; done; exit 0",
        &["pgid", "bg"],
    );
    let started = Instant::now();
    let mut run = Running::spawn(quorumlock_run(
        &nodes,
        &[
            "--key",
            "sup:leftovers",
            "--grace",
            "1s",
            "--",
            "sh",
            "-c",
            &command,
        ],
    ));
    let pgid: u32 = wait_for_line(&dir.join("pgid")).parse().expect("pid");
    run.group = Some(pgid);
    wait_for_line(&dir.join("bg"));
    // Seen held while the job was alive before and after the look at the key.
    assert!(
        wait_until(START_LIMIT, || {
            stat(pgid).is_none_or(|s| s.state == 'Z')
                && !live_members(pgid).is_empty()
                && dbsize(&nodes[0]) == 1
                && !live_members(pgid).is_empty()
        }),
        "the lock is held while the job outlives the command"
    );
    let status = run.wait(grace + EXIT_LIMIT);
    assert_eq!(
        status.code(),
        Some(0),
        "the command's own status: {}",
        run.stderr()
    );
    assert!(started.elapsed() >= grace, "the job got its grace period");
    assert!(live_members(pgid).is_empty(), "the job outlived the release");
    assert_eq!(dbsize(&nodes[0]), 0, "released once the group was empty");
    let _ = std::fs::remove_dir_all(&dir);
}
