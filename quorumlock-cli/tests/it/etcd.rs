//! The `quorumlock` binary on an etcd cluster (feature `etcd`): `run`
//! beside `etcdctl lock` on one name, a holder stopped past its lease,
//! `status`, `unlock` and `check --key`, and `check` on a healthy, a
//! degraded and a broken cluster. Against real etcd members.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock_testkit::cli::{Binary, Running, exit, scratch, stat, text, wait_for_line};
use quorumlock_testkit::etcd::EtcdCluster;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// How long a command may take to get to its first line.
const START_LIMIT: Duration = Duration::from_secs(20);

/// `quorumlock ARGS --nodes URL`: the URL on the command line, where clap
/// splits it at the commas and quorumlock joins the members back.
fn with_nodes_flag(cluster: &EtcdCluster, args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.args(args).args(["--nodes", &cluster.url()]);
    cmd
}

/// `quorumlock ARGS` over `cluster` (its URL in `QUORUMLOCK_NODES`).
fn quorumlock(cluster: &EtcdCluster, args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.env("QUORUMLOCK_NODES", cluster.url()).args(args);
    cmd
}

/// `quorumlock run ARGS -- sh -c SCRIPT` over `cluster`, running.
fn run(cluster: &EtcdCluster, args: &[&str], script: &str) -> Running {
    let mut cmd = quorumlock(cluster, &["run"]);
    cmd.args(args).args(["--", "sh", "-c", script]);
    Running::spawn(cmd)
}

/// A shell command that appends `start NS` and `end NS` (wall clock) to
/// `log` around `sleep seconds`.
fn recorded(log: &Path, seconds: f64) -> String {
    let log = log.display();
    format!("echo start $(date +%s%N) >> {log}; sleep {seconds}; echo end $(date +%s%N) >> {log}")
}

/// The `(start, end)` intervals in the logs; a start without an end (a
/// killed command) ends at `killed_at`.
fn intervals(logs: &[&Path], killed_at: u128) -> Vec<(u128, u128)> {
    let mut all = Vec::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let mut start = None;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (what, ns) = (words.next(), words.next().and_then(|n| n.parse::<u128>().ok()));
            match (what, ns) {
                (Some("start"), Some(ns)) => start = Some(ns),
                (Some("end"), Some(ns)) => all.push((start.take().expect("a start before"), ns)),
                _ => panic!("bad line {line:?} in {}", log.display()),
            }
        }
        if let Some(start) = start {
            all.push((start, killed_at));
        }
    }
    all.sort_unstable();
    all
}

fn assert_disjoint(intervals: &[(u128, u128)]) {
    for pair in intervals.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "two holders at once: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

#[test]
fn run_and_etcdctl_lock_on_one_name_never_overlap() {
    let cluster = EtcdCluster::start(3);
    let dir = scratch("etcd-interop");
    let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
    let runs: Vec<_> = (0..4)
        .map(|_| {
            with_nodes_flag(
                &cluster,
                &["run", "--key", "shared", "--ttl", "5s", "--wait", "20s"],
            )
            .args(["--", "sh", "-c", &recorded(&ours, 0.2)])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn quorumlock")
        })
        .collect();
    // etcdctl takes etcd's own lock on the name (keys `shared/<lease>`, the
    // lowest create revision holds), one after another, while the runs
    // queue on the same keys.
    let endpoints = cluster.endpoints();
    let etcdctl = std::thread::spawn(move || {
        (0..4)
            .map(|_| {
                Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .arg(format!("--endpoints={endpoints}"))
                    .args(["lock", "shared", "--", "sh", "-c", &recorded(&theirs, 0.2)])
                    .stdout(Stdio::null())
                    .status()
                    .expect("run etcdctl")
            })
            .collect::<Vec<_>>()
    });
    for mut run in runs {
        let status = run.wait().expect("quorumlock exits");
        assert!(status.success(), "quorumlock run: {status}");
    }
    for status in etcdctl.join().expect("the etcdctl loop") {
        assert!(status.success(), "etcdctl lock: {status}");
    }
    let all = intervals(&[&dir.join("ours"), &dir.join("theirs")], now_ns());
    assert_eq!(all.len(), 8, "every command ran once: {all:?}");
    assert_disjoint(&all);
    assert!(cluster.keys("shared/").is_empty(), "{:?}", cluster.keys(""));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Watches process `pid` every millisecond on a thread until it has ended
/// (gone or a zombie), and gives the wall-clock times (ns) it was last
/// seen alive and first seen ended: its death lies between them.
fn watch_death(pid: u32) -> std::thread::JoinHandle<(u128, u128)> {
    std::thread::spawn(move || {
        let mut alive = now_ns();
        loop {
            let ended = stat(pid).is_none_or(|p| matches!(p.state, 'Z' | 'X'));
            let now = now_ns();
            if ended {
                return (alive, now);
            }
            alive = now;
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

#[test]
fn a_holder_stopped_past_its_lease_has_its_command_killed_before_the_next_holder_starts() {
    let cluster = EtcdCluster::start(3);
    let dir = scratch("etcd-stopped");
    let (first_log, second_log, pgid_file) = (dir.join("first"), dir.join("second"), dir.join("pgid"));
    // The shell is the command's process group leader: its death is the
    // group's (the guardian kills the whole group at once).
    let first_command = format!(
        "echo $$ > {}; {}",
        pgid_file.display(),
        recorded(&first_log, 30.0)
    );
    let mut first = run(&cluster, &["--key", "stopped", "--ttl", "2s"], &first_command);
    let pgid: u32 = wait_for_line(&pgid_file, START_LIMIT).parse().expect("pid");
    first.group = Some(pgid);
    let death = watch_death(pgid);
    // quorumlock itself, not its command: its keep-alive stops, the lease
    // runs out, and only the guardian is left to act.
    first.signal("STOP");
    let stopped_at = now_ns();
    let mut second = run(
        &cluster,
        &["--key", "stopped", "--ttl", "2s", "--wait", "15s"],
        &recorded(&second_log, 0.2),
    );
    let (last_alive, seen_dead) = death.join().expect("watcher");
    assert!(
        seen_dead - stopped_at < 3_000_000_000,
        "the guardian took {} ms to kill the stopped holder's command",
        (seen_dead - stopped_at) / 1_000_000
    );
    let status = second.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "second run: {}", second.stderr());
    let first_text = std::fs::read_to_string(&first_log).unwrap();
    assert!(
        !first_text.contains("end"),
        "the killed command ended itself: {first_text}"
    );
    let second_start = intervals(&[&second_log], 0)[0].0;
    assert!(
        second_start > last_alive,
        "the second command started {} ms before the first was last seen alive",
        (last_alive - second_start) / 1_000_000
    );
    eprintln!(
        "killed {}..{} ms after SIGSTOP, second command started {} ms after the kill",
        (last_alive - stopped_at) / 1_000_000,
        (seen_dead - stopped_at) / 1_000_000,
        (second_start as i128 - seen_dead as i128) / 1_000_000
    );
    let all = intervals(&[&first_log, &second_log], seen_dead);
    assert_eq!(all.len(), 2, "{all:?}");
    first.signal("CONT");
    let status = first.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(exit::LOST), "{}", first.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_and_check_show_the_holder_and_unlock_with_its_token_frees_the_lock() {
    let cluster = EtcdCluster::start(1);
    let dir = scratch("etcd-status");
    let started = dir.join("started");
    let holding = format!("echo $QUORUMLOCK_LOCK_TOKEN >> {}; sleep 60", started.display());
    let mut holder = run(&cluster, &["--key", "report", "--ttl", "10s"], &holding);
    let token = wait_for_line(&started, START_LIMIT);
    let status = quorumlock(&cluster, &["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(1), "held: {}", text(&status.stderr));
    let shown = text(&status.stdout);
    assert!(
        shown.contains(&format!("key \"report\": held by \"{token}\"")),
        "{shown}"
    );
    let json = text(
        &quorumlock(&cluster, &["status", "report", "--json"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(json.contains(&format!("\"token\":\"{token}\"")), "{json}");
    let check = quorumlock(&cluster, &["check", "--key", "report"])
        .output()
        .unwrap();
    let shown = text(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{shown}{}", text(&check.stderr));
    assert!(shown.contains(&format!("held by \"{token}\"")), "{shown}");
    let free = quorumlock(&cluster, &["status", "other"]).output().unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free.stdout));
    let wrong = quorumlock(
        &cluster,
        &["unlock", "report", "--token", "0123456789abcdef0123456789abcdef"],
    )
    .output()
    .unwrap();
    assert_eq!(
        wrong.status.code(),
        Some(1),
        "another token deletes nothing: {}",
        text(&wrong.stderr)
    );
    assert!(!cluster.keys("report/").is_empty());
    let unlock = quorumlock(&cluster, &["unlock", "report", "--token", &token])
        .output()
        .unwrap();
    assert_eq!(unlock.status.code(), Some(0), "{}", text(&unlock.stderr));
    assert!(cluster.keys("report/").is_empty(), "{:?}", cluster.keys(""));
    let status = quorumlock(&cluster, &["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(0), "free: {}", text(&status.stdout));
    // Its next keep-alive round finds the key gone: the holder stops.
    let status = holder.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(exit::LOST), "{}", holder.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The table's member rows: the lines that start with their number.
fn member_rows(table: &str) -> Vec<&str> {
    table
        .lines()
        .filter(|line| line.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

#[test]
fn check_lists_every_member_and_follows_the_redis_rules_on_dead_ones() {
    let mut cluster = EtcdCluster::start(3);
    let healthy = with_nodes_flag(&cluster, &["check"]).output().unwrap();
    let shown = text(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{shown}{}", text(&healthy.stderr));
    let rows = member_rows(&shown);
    assert_eq!(rows.len(), 3, "{shown}");
    assert_eq!(
        rows.iter().filter(|r| r.contains(" leader ")).count(),
        1,
        "{shown}"
    );
    assert_eq!(
        rows.iter().filter(|r| r.contains(" follower ")).count(),
        2,
        "{shown}"
    );
    assert!(shown.contains("all members fit for an etcd lock"), "{shown}");
    // One follower dead: an error row, so status 1 as for a dead Redis
    // node, but a majority of the cluster still answers with a leader.
    let follower = (0..3).find(|&i| i != cluster.leader()).unwrap();
    cluster.kill(follower);
    let degraded = quorumlock(&cluster, &["check", "--timeout", "1s", "--json"])
        .output()
        .unwrap();
    let shown = text(&degraded.stdout);
    assert_eq!(degraded.status.code(), Some(1), "a member is unusable: {shown}");
    assert!(shown.contains("\"code\":\"unreachable\""), "{shown}");
    assert!(shown.contains("\"usable\":2"), "{shown}");
    assert!(!shown.contains("no_majority"), "two of three answer: {shown}");
    // A second one dead: no majority.
    let other = (0..3).find(|&i| i != follower && i != cluster.leader()).unwrap();
    cluster.kill(other);
    let broken = quorumlock(&cluster, &["check", "--timeout", "1s"])
        .output()
        .unwrap();
    let shown = text(&broken.stdout);
    assert_eq!(broken.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("only 1 of the cluster's 3 members answer"),
        "{shown}"
    );
}

#[test]
fn check_warns_about_a_partial_member_list() {
    let cluster = EtcdCluster::start(3);
    let one = QUORUMLOCK
        .command(&[])
        .args(["check", "--nodes", &cluster.member_url(0)])
        .output()
        .unwrap();
    let shown = text(&one.stdout);
    assert_eq!(one.status.code(), Some(0), "a warning only: {shown}");
    assert!(
        shown.contains("1 of the cluster's 3 members are listed"),
        "{shown}"
    );
    let strict = QUORUMLOCK
        .command(&[])
        .args(["check", "--strict", "--json", "--nodes", &cluster.member_url(0)])
        .output()
        .unwrap();
    let shown = text(&strict.stdout);
    assert_eq!(strict.status.code(), Some(1), "{shown}");
    assert!(shown.contains("\"members_missing\""), "{shown}");
}
