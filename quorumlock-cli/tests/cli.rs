//! The `quorumlock` binary against real redis-server nodes: `run` (mutual
//! exclusion, termination on loss, exit statuses), `check`, `demo`, and
//! usage errors.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::{Persistence, RedisServer, dbsize, leftovers, set_foreign, start_nodes, urls};

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// Exit statuses documented in `quorumlock --help`.
const USAGE: i32 = 2;
const BUSY: i32 = 75;
const LOST: i32 = 79;
const NOT_FOUND: i32 = 127;

/// `quorumlock ARGS` over `nodes` (through QUORUMLOCK_NODES), with a node
/// timeout generous enough for a loaded machine.
fn quorumlock(nodes: &[RedisServer], args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("QUORUMLOCK_NODES");
    if !nodes.is_empty() {
        cmd.env("QUORUMLOCK_NODES", urls(nodes).join(","));
    }
    cmd.stdin(Stdio::null());
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("run quorumlock")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh empty directory for marker files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorumlock-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Waits until `path` exists (the command under test got that far).
fn wait_for_file(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit, at most `limit`.
fn wait_child(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("quorumlock did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn process_exists(pid: &str) -> bool {
    Path::new("/proc").join(pid.trim()).exists()
}

#[test]
fn run_executes_the_command_once_while_another_run_is_busy_or_waits() {
    let nodes = start_nodes(3);
    let dir = scratch("busy");
    let (log, started) = (dir.join("log"), dir.join("started"));
    let script = format!(
        "echo first >> {0}; echo >> {1}; sleep 2",
        log.display(),
        started.display()
    );
    let mut first = quorumlock(
        &nodes,
        &[
            "run",
            "--key",
            "cli:busy",
            "--ttl",
            "5s",
            "--grace",
            "1s",
            "--node-timeout",
            "500ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .expect("spawn first run");
    wait_for_file(&started, Duration::from_secs(10));

    let second = format!("echo second >> {}", log.display());
    let busy = output(quorumlock(
        &nodes,
        &[
            "run",
            "--key",
            "cli:busy",
            "--wait",
            "0",
            "--node-timeout",
            "500ms",
            "--",
            "sh",
            "-c",
            &second,
        ],
    ));
    assert_eq!(busy.status.code(), Some(BUSY), "stderr: {}", text(&busy.stderr));
    assert!(
        text(&busy.stderr).contains("busy"),
        "stderr: {}",
        text(&busy.stderr)
    );

    // A run that may wait gets the lock once the first one has released it.
    let third = format!("echo waited >> {}", log.display());
    let waiter = quorumlock(
        &nodes,
        &[
            "run",
            "--key",
            "cli:busy",
            "--wait",
            "10s",
            "--node-timeout",
            "500ms",
            "--",
            "sh",
            "-c",
            &third,
        ],
    )
    .spawn()
    .expect("spawn waiting run");
    assert!(wait_child(&mut first, Duration::from_secs(20)).success());
    let mut waiter = waiter;
    assert!(wait_child(&mut waiter, Duration::from_secs(20)).success());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "first\nwaited\n");
    for node in &nodes {
        assert_eq!(
            dbsize(node),
            0,
            "every run released its lock: {}",
            leftovers(node)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kills a majority of nodes while `script` runs under a 3 s lock and
/// checks that the command is gone and the lost status returned in time.
fn losing_a_majority_ends(name: &str, script: &str) {
    let (ttl, grace) = (Duration::from_secs(3), Duration::from_secs(1));
    let mut nodes = start_nodes(3);
    let dir = scratch(name);
    let pidfile = dir.join("pid");
    let script = script.replace("PIDFILE", &pidfile.display().to_string());
    let mut run = quorumlock(
        &nodes,
        &[
            "run",
            "--key",
            "cli:lost",
            "--ttl",
            "3s",
            "--grace",
            "1s",
            "--node-timeout",
            "300ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn run");
    let pid = wait_for_file(&pidfile, Duration::from_secs(10));
    assert!(process_exists(&pid));
    let killed = Instant::now();
    nodes[0].kill();
    nodes[1].kill();
    let status = wait_child(&mut run, ttl + grace + Duration::from_secs(10));
    let took = killed.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(LOST), "stderr: {stderr}");
    assert!(stderr.contains("terminated"), "stderr: {stderr}");
    assert!(
        !process_exists(&pid),
        "the command (pid {}) still runs",
        pid.trim()
    );
    // SIGKILL comes at the latest when the validity ends (ttl after the last
    // renewal); allow the same again for a loaded machine.
    assert!(took < ttl + grace + Duration::from_secs(3), "took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `run` without `--wait` waits as long as QUORUMLOCK_WAIT says (the name
/// `Redlock::from_env` reads), and `--wait` on the command line wins.
#[test]
fn run_reads_its_wait_from_the_environment() {
    let nodes = start_nodes(3);
    for node in &nodes {
        set_foreign(node, "cli:env-wait", "someone-else", 60_000);
    }
    let busy_after = |env_wait: &str, flags: &[&str]| {
        let mut args = vec!["run", "--key", "cli:env-wait", "--node-timeout", "500ms"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "true"]);
        let mut cmd = quorumlock(&nodes, &args);
        cmd.env("QUORUMLOCK_WAIT", env_wait);
        let start = Instant::now();
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(BUSY), "stderr: {}", text(&out.stderr));
        start.elapsed()
    };
    // Far below the 10 s default, far above a single attempt.
    let waited = busy_after("1500ms", &[]);
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(8),
        "waited {waited:?} with QUORUMLOCK_WAIT=1500ms"
    );
    let waited = busy_after("1m", &["--wait", "0"]);
    assert!(waited < Duration::from_secs(8), "--wait 0 waited {waited:?}");
}

#[test]
fn losing_a_majority_terminates_the_command() {
    losing_a_majority_ends("lost-term", "echo $$ > PIDFILE; exec sleep 60");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    losing_a_majority_ends(
        "lost-kill",
        "trap '' TERM; echo $$ > PIDFILE; while :; do sleep 0.1; done",
    );
}

#[test]
fn signals_to_quorumlock_are_forwarded_and_the_lock_kept_until_the_command_exits() {
    let nodes = start_nodes(1);
    let dir = scratch("signals");
    let ready = dir.join("ready");
    // The command takes a moment to clean up after SIGTERM, then exits 3.
    let script = format!(
        "trap 'sleep 0.3; exit 3' TERM; echo >> {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let mut run = quorumlock(
        &nodes,
        &["run", "--key", "cli:signals", "--", "sh", "-c", &script],
    )
    .spawn()
    .expect("spawn run");
    wait_for_file(&ready, Duration::from_secs(10));
    let status = Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .expect("kill(1)");
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        dbsize(&nodes[0]),
        1,
        "the lock is held while the command cleans up"
    );
    let status = wait_child(&mut run, Duration::from_secs(10));
    assert_eq!(status.code(), Some(3), "the command's own status");
    assert_eq!(dbsize(&nodes[0]), 0, "released after the command exited");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exit_statuses_pass_through() {
    let nodes = start_nodes(1);
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 128 + 15)] {
        let out = output(quorumlock(
            &nodes,
            &["run", "--key", "cli:codes", "--", "sh", "-c", script],
        ));
        assert_eq!(out.status.code(), Some(code), "{script}: {}", text(&out.stderr));
    }
    let missing = output(quorumlock(
        &nodes,
        &["run", "--key", "cli:codes", "--", "/nonexistent/cmd"],
    ));
    assert_eq!(missing.status.code(), Some(NOT_FOUND));
    assert!(text(&missing.stderr).contains("/nonexistent/cmd"));
    assert_eq!(dbsize(&nodes[0]), 0, "every run released its lock");
}

#[test]
fn the_grace_period_defaults_to_fit_a_short_ttl_and_a_longer_one_is_refused() {
    let nodes = start_nodes(1);
    let short = output(quorumlock(
        &nodes,
        &["run", "--key", "cli:grace", "--ttl", "2s", "--", "true"],
    ));
    assert_eq!(short.status.code(), Some(0), "stderr: {}", text(&short.stderr));

    let refused = output(quorumlock(
        &nodes,
        &[
            "run",
            "--key",
            "cli:grace",
            "--grace",
            "3s",
            "--ttl",
            "2s",
            "--",
            "true",
        ],
    ));
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(USAGE), "{stderr}");
    assert!(
        stderr.contains("--grace 3s") && stderr.contains("--ttl 2s"),
        "{stderr}"
    );

    // The ttl was not given: the message says it is the default.
    let refused = output(quorumlock(
        &nodes,
        &["run", "--key", "cli:grace", "--grace", "20s", "--", "true"],
    ));
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(USAGE), "{stderr}");
    assert!(
        stderr.contains("--grace 20s") && stderr.contains("30s (default)"),
        "{stderr}"
    );
    assert!(!stderr.contains("--ttl 30s"), "{stderr}");
    assert_eq!(dbsize(&nodes[0]), 0, "the run released its lock");
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    let node = ["--nodes", "redis://127.0.0.1:1"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--key", "k", "--ttl", "5x", "--", "true"],
            "unknown unit \"x\"",
        ),
        (&["run", "--key", "k", "--wait=-1s", "--", "true"], "negative"),
        (&["run", "--", "true"], "--key"),
        (&["run", "--key", "k"], "COMMAND"),
        (&["run", "--key", "k", "true"], "unexpected argument"),
        (
            &["run", "--key", "k", "--ttl", "10s", "--grace", "6s", "--", "true"],
            "half of --ttl",
        ),
        (&["run", "--key", "k", "--", "true"], "no nodes"),
        (
            &["run", "--key", "k", "--nodes", "not a url", "--", "true"],
            "bad node URL",
        ),
        (
            &[
                "run", "--key", "k", "--ttl", "0", "--grace", "0", node[0], node[1], "--", "true",
            ],
            "ttl",
        ),
        (&["check"], "no nodes"),
        #[cfg(feature = "demo")]
        (&["demo", "--workers", "0"], "at least 1"),
        (&["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, message) in cases {
        let out = output(quorumlock(&[], args));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: expected {message:?} in {stderr}"
        );
    }
}

#[test]
fn check_reports_missing_persistence_and_an_unreachable_node() {
    let nodes = [
        RedisServer::start_with(Persistence::AofAlways, &[]),
        RedisServer::start_with(Persistence::None, &[]),
        RedisServer::start_with(Persistence::AofAlways, &[]),
    ];
    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut list = urls(&nodes);
    list.push(format!("redis://127.0.0.1:{closed}"));
    let out = output(quorumlock(
        &[],
        &["check", "--node-timeout", "1s", "--nodes", &list.join(",")],
    ));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let bare = format!("127.0.0.1:{}/0", nodes[1].port());
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(&bare) && l.contains("warning: no persistence")),
        "{stdout}"
    );
    let dead = format!("127.0.0.1:{closed}/0");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(&dead) && l.contains("ERROR: unreachable")),
        "{stdout}"
    );
    assert!(stdout.contains("4 nodes: an even number"), "{stdout}");
    assert!(
        stdout.contains("appendfsync"),
        "the table has its header: {stdout}"
    );
}

#[test]
fn check_passes_on_independent_persistent_masters() {
    let nodes: Vec<_> = (0..3)
        .map(|_| RedisServer::start_with(Persistence::AofAlways, &[]))
        .collect();
    let out = output(quorumlock(&nodes, &["check", "--node-timeout", "1s"]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("all nodes fit for Redlock"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("master") && l.contains("always"))
            .count(),
        3
    );
}

#[cfg(feature = "demo")]
#[test]
fn demo_short_run_prints_its_table() {
    let out = output(quorumlock(&[], &["demo", "--seconds", "2"]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("| worker | acquisitions"), "{stdout}");
    assert!(stdout.contains("losses signalled"), "{stdout}");
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    assert!(stdout.contains("killed node"), "{stdout}");
}

#[cfg(feature = "demo")]
#[test]
fn demo_on_given_nodes_starts_and_kills_nothing() {
    let nodes = start_nodes(3);
    let out = output(quorumlock(&nodes, &["demo", "--seconds", "1"]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("using the given nodes"), "{stdout}");
    assert!(!stdout.contains("killed node"), "{stdout}");
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    for node in &nodes {
        assert!(node.command(&["PING"]).unwrap().starts_with("+PONG"));
    }
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_options_without_the_tls_feature_are_a_usage_error() {
    let out = output(quorumlock(
        &[],
        &[
            "check",
            "--tls-ca",
            "/dev/null",
            "--nodes",
            "rediss://127.0.0.1:1",
        ],
    ));
    assert_eq!(out.status.code(), Some(USAGE));
    assert!(
        text(&out.stderr).contains("`tls` feature"),
        "{}",
        text(&out.stderr)
    );
}
