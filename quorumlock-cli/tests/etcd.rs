//! The `quorumlock` binary on an etcd cluster (feature `etcd`): `run`
//! beside `etcdctl lock` on one name, a holder stopped past its lease,
//! `status` and `unlock`, and `check`. Against real etcd members.

#![cfg(feature = "etcd")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock_testkit::cli::{
    Binary, Running, exit, live_members, scratch, text, wait_for_line, wait_until,
};
use quorumlock_testkit::etcd::EtcdCluster;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// How long a command may take to get to its first line.
const START_LIMIT: Duration = Duration::from_secs(20);

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
    let cluster = EtcdCluster::start(1);
    let dir = scratch("etcd-interop");
    let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
    let runs: Vec<_> = (0..3)
        .map(|_| {
            quorumlock(
                &cluster,
                &["run", "--key", "shared", "--ttl", "5s", "--wait", "30s", "--"],
            )
            .args(["sh", "-c", &recorded(&ours, 0.2)])
            .spawn()
            .expect("spawn quorumlock")
        })
        .collect();
    let mut etcdctl: Vec<_> = (0..3)
        .map(|_| {
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .arg(format!("--endpoints={}", cluster.endpoints()))
                .args(["lock", "shared", "--", "sh", "-c", &recorded(&theirs, 0.2)])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn etcdctl")
        })
        .collect();
    for mut run in runs {
        let status = run.wait().expect("quorumlock exits");
        assert!(status.success(), "quorumlock run: {status}");
    }
    for child in &mut etcdctl {
        assert!(child.wait().expect("etcdctl exits").success());
    }
    let all = intervals(&[&ours, &theirs], now_ns());
    assert_eq!(all.len(), 6, "every command ran once: {all:?}");
    assert_disjoint(&all);
    assert!(cluster.keys("shared/").is_empty(), "{:?}", cluster.keys(""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_holder_stopped_past_its_lease_has_its_command_killed_before_the_next_holder_starts() {
    let cluster = EtcdCluster::start(3);
    let dir = scratch("etcd-stopped");
    let (first_log, second_log, pgid_file) = (dir.join("first"), dir.join("second"), dir.join("pgid"));
    let first_command = format!(
        "echo $$ > {}; {}",
        pgid_file.display(),
        recorded(&first_log, 60.0)
    );
    let mut first = run(&cluster, &["--key", "stopped", "--ttl", "2s"], &first_command);
    let pgid: u32 = wait_for_line(&pgid_file, START_LIMIT).parse().expect("pid");
    first.group = Some(pgid);
    first.signal("STOP");
    let second_command = recorded(&second_log, 0.2);
    let mut second = run(
        &cluster,
        &["--key", "stopped", "--ttl", "2s", "--wait", "20s"],
        &second_command,
    );
    // The guardian kills the stopped holder's command by the end of its
    // validity: before its lease can expire on etcd and the second run
    // can take the lock.
    assert!(
        wait_until(Duration::from_secs(4), || live_members(pgid).is_empty()),
        "the stopped holder's command still runs: {:?}",
        live_members(pgid)
    );
    let killed_at = now_ns();
    let status = second.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "second run: {}", second.stderr());
    let all = intervals(&[&first_log, &second_log], killed_at);
    assert_eq!(all.len(), 2, "{all:?}");
    assert_disjoint(&all);
    first.signal("CONT");
    let status = first.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(exit::LOST), "{}", first.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_shows_the_holder_and_unlock_frees_the_lock() {
    let cluster = EtcdCluster::start(1);
    let dir = scratch("etcd-status");
    let started = dir.join("started");
    let holding = format!("echo >> {}; sleep 60", started.display());
    let mut holder = run(&cluster, &["--key", "report", "--ttl", "10s"], &holding);
    wait_for_line(&started, START_LIMIT);
    let status = quorumlock(&cluster, &["status", "report", "--json"])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(1), "held: {}", text(&status.stderr));
    let shown = text(&status.stdout);
    assert!(shown.contains("\"held\""), "{shown}");
    let free = quorumlock(&cluster, &["status", "other"]).output().unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free.stdout));
    let unlock = quorumlock(&cluster, &["unlock", "report", "--force", "--yes"])
        .output()
        .unwrap();
    assert_eq!(unlock.status.code(), Some(0), "{}", text(&unlock.stderr));
    assert!(cluster.keys("report/").is_empty());
    // Its next keep-alive round finds the key gone: the holder stops.
    let status = holder.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(exit::LOST), "{}", holder.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_lists_every_member_and_reports_a_dead_one() {
    let mut cluster = EtcdCluster::start(3);
    let healthy = quorumlock(&cluster, &["check"]).output().unwrap();
    let shown = text(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{shown}{}", text(&healthy.stderr));
    assert_eq!(shown.matches("leader").count(), 1, "{shown}");
    assert_eq!(shown.matches("follower").count(), 2, "{shown}");
    assert!(shown.contains("all nodes fit for an etcd lock"), "{shown}");
    let follower = (0..3).find(|&i| i != cluster.leader()).unwrap();
    cluster.kill(follower);
    let degraded = quorumlock(&cluster, &["check", "--timeout", "1s", "--json"])
        .output()
        .unwrap();
    let shown = text(&degraded.stdout);
    assert_eq!(degraded.status.code(), Some(1), "a member is unusable: {shown}");
    assert!(shown.contains("\"unreachable\""), "{shown}");
    assert!(!shown.contains("no_leader"), "the others keep a leader: {shown}");
}
