//! When `quorumlock run` ends its command: on losing a majority of nodes it
//! terminates the command (SIGKILL after the grace period for one that
//! ignores SIGTERM) and exits 79; a signal to quorumlock is forwarded, and
//! the lock kept until the command has exited. Through the built binary,
//! against real redis-server nodes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::cli::{Binary, exit, scratch, wait_child, wait_for_line};
use quorumlock_testkit::{dbsize, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

fn process_exists(pid: &str) -> bool {
    Path::new("/proc").join(pid.trim()).exists()
}

/// Kills a majority of nodes while `script` runs under a 3 s lock and
/// checks that the command is gone and the lost status returned in time.
fn losing_a_majority_ends(name: &str, script: &str) {
    let (ttl, grace) = (Duration::from_secs(3), Duration::from_secs(1));
    let mut nodes = start_nodes(3);
    let dir = scratch(name);
    let pidfile = dir.join("pid");
    let script = script.replace("PIDFILE", &pidfile.display().to_string());
    let mut run = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:lost", "--ttl", "3s", "--grace", "1s"])
        .args(["--node-timeout", "300ms", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn run");
    let pid = wait_for_line(&pidfile, Duration::from_secs(10));
    assert!(process_exists(&pid));
    let killed = Instant::now();
    nodes[0].kill();
    nodes[1].kill();
    let status = wait_child(&mut run, ttl + grace + Duration::from_secs(10));
    let took = killed.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(exit::LOST), "stderr: {stderr}");
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
    let mut run = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:signals", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn run");
    wait_for_line(&ready, Duration::from_secs(10));
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
