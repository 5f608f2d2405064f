//! `quorumlock run` runs the command once at a time: a second run of the
//! same key is busy (75) or waits for the lock, as long as `--wait` or
//! QUORUMLOCK_WAIT says. Through the built binary, against real
//! redis-server nodes.

use std::time::{Duration, Instant};

use quorumlock_testkit::cli::{Binary, exit, scratch, text, wait_child, wait_for_line};
use quorumlock_testkit::{dbsize, leftovers, set_foreign, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

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
    let mut first = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:busy", "--ttl", "5s", "--grace", "1s"])
        .args(["--node-timeout", "500ms", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn first run");
    wait_for_line(&started, Duration::from_secs(10));

    let second = format!("echo second >> {}", log.display());
    let busy = QUORUMLOCK
        .command(&nodes)
        .args([
            "run",
            "--key",
            "cli:busy",
            "--wait",
            "0",
            "--node-timeout",
            "500ms",
        ])
        .args(["--", "sh", "-c", &second])
        .output()
        .expect("run quorumlock");
    assert_eq!(
        busy.status.code(),
        Some(exit::BUSY),
        "stderr: {}",
        text(&busy.stderr)
    );
    assert!(
        text(&busy.stderr).contains("busy"),
        "stderr: {}",
        text(&busy.stderr)
    );

    // A run that may wait gets the lock once the first one has released it.
    let third = format!("echo waited >> {}", log.display());
    let mut waiter = QUORUMLOCK
        .command(&nodes)
        .args([
            "run",
            "--key",
            "cli:busy",
            "--wait",
            "10s",
            "--node-timeout",
            "500ms",
        ])
        .args(["--", "sh", "-c", &third])
        .spawn()
        .expect("spawn waiting run");
    assert!(wait_child(&mut first, Duration::from_secs(20)).success());
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

/// `run` without `--wait` waits as long as QUORUMLOCK_WAIT says (the name
/// `Redlock::from_env` reads), and `--wait` on the command line wins.
#[test]
fn run_reads_its_wait_from_the_environment() {
    let nodes = start_nodes(3);
    for node in &nodes {
        set_foreign(node, "cli:env-wait", "someone-else", 60_000);
    }
    let busy_after = |env_wait: &str, flags: &[&str]| {
        let mut cmd = QUORUMLOCK.command(&nodes);
        cmd.args(["run", "--key", "cli:env-wait", "--node-timeout", "500ms"])
            .args(flags)
            .args(["--", "true"])
            .env("QUORUMLOCK_WAIT", env_wait);
        let start = Instant::now();
        let out = cmd.output().expect("run quorumlock");
        assert_eq!(
            out.status.code(),
            Some(exit::BUSY),
            "stderr: {}",
            text(&out.stderr)
        );
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
