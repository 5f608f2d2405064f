//! The `quorumlock` binary on a ZooKeeper ensemble (feature `zookeeper`):
//! concurrent `run`s on one name, the session's bounds on `run`, and the
//! bodies shared with etcd ([`crate::consensus`]): `status`, `unlock
//! --force` and `check --key` on a held lock, and `check` on a healthy and
//! a degraded ensemble. Against real ZooKeeper servers.

use std::process::Stdio;
use std::time::{Duration, Instant};

use quorumlock_testkit::cli::{Running, scratch, text};
use quorumlock_testkit::zookeeper::ZkEnsemble;

use crate::consensus::{self, QUORUMLOCK, assert_disjoint, intervals, quorumlock, recorded, with_nodes_flag};

consensus::store!(ZkEnsemble {
    name: "zk",
    fit: "all servers fit for a ZooKeeper lock",
    alone: " standalone ",
    nodes: url,
    // A lock's nodes are named by their holders' tokens.
    entries: |ensemble: &ZkEnsemble, key: &str| ensemble.children(&format!("/{key}")),
});

/// The session the tests ask for: the ensemble's tick is 100 ms, and a
/// short session lets a lost lock be noticed within a second or two
/// instead of the default 10 s.
const SESSION: &str = "?session_timeout=2s";

/// How long a run with `--wait` may take in all: its queue of four short
/// commands, each ahead of it holding the lock a fraction of a second.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The ensemble's URL with the tests' session.
fn url(ensemble: &ZkEnsemble) -> String {
    format!("{}{SESSION}", ensemble.url())
}

#[test]
fn status_and_check_show_the_holder_and_a_forced_unlock_frees_the_lock() {
    consensus::held_lock_is_shown_and_freed::<ZkEnsemble>(|_| ["--force", "--yes"]);
}

/// Every command appends to one log, its times from the one wall clock of
/// this machine: two holders at once show as overlapping intervals.
#[test]
fn runs_on_one_name_never_overlap() {
    let started = Instant::now();
    let ensemble = ZkEnsemble::start(3);
    let dir = scratch("zk-exclusion");
    let log = dir.join("log");
    let runs: Vec<_> = (0..4)
        .map(|i| {
            let args = ["run", "--key", "shared", "--ttl", "5s", "--wait", "20s"];
            // Half through --nodes (split by clap, joined back), half
            // through the environment.
            let mut cmd = match i % 2 {
                0 => with_nodes_flag(&ensemble, &args),
                _ => quorumlock(&ensemble, &args),
            };
            cmd.args(["--", "sh", "-c", &recorded(&log, 0.2)]);
            cmd.stdout(Stdio::null());
            Running::spawn(cmd)
        })
        .collect();
    for mut run in runs {
        let status = run.wait(RUN_LIMIT);
        assert!(status.success(), "quorumlock run: {status}: {}", run.stderr());
    }
    let all = intervals(&[&log], None);
    assert_eq!(all.len(), 4, "every command ran once: {all:?}");
    assert_disjoint(&all);
    // Each run released its lock node before it exited.
    assert!(
        ensemble.children("/shared").is_empty(),
        "{:?}",
        ensemble.children("/shared")
    );
    eprintln!("four runs in {:?}", started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the defaults (a 30 s ttl, a 10 s session of which a lock gets two
/// thirds), the default grace, made for the ttl, must fit in the validity
/// the session grants, or the command never starts.
#[test]
fn run_starts_its_command_with_the_default_session_and_ttl() {
    let ensemble = ZkEnsemble::start(1);
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.env("QUORUMLOCK_NODES", ensemble.url())
        .args(["run", "--key", "defaults", "--", "sh", "-c", "echo ran"]);
    let output = cmd.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "ran\n");
}

/// A --grace longer than the validity a session grants (two thirds of the
/// tests' 2 s session) is a usage error that names it, not a lock "held up".
#[test]
fn a_grace_beyond_what_the_session_grants_is_a_usage_error() {
    let ensemble = ZkEnsemble::start(1);
    let output = quorumlock(&ensemble, &["run", "--key", "graceful", "--grace", "2s"])
        .args(["--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("--grace 2s"),
        "{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "", "the command did not run");
}

/// How long the command of [`run_keeps_its_command_through_the_heartbeats`]
/// runs: past two validity periods of the tests' session (two thirds of
/// 2 s each), so that it lives through heartbeats.
const PAST_TWO_VALIDITIES: &str = "3";

/// The default ttl (30 s) on a 2 s session: the lock is valid for 1.3 s
/// after each heartbeat, and the default grace, fitted to what the session
/// grants, must neither keep the command from starting nor stop it
/// between two heartbeats.
#[test]
fn run_keeps_its_command_through_the_heartbeats() {
    let ensemble = ZkEnsemble::start(1);
    let output = quorumlock(&ensemble, &["run", "--key", "long", "--verbose"])
        .args(["--", "sleep", PAST_TWO_VALIDITIES])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

#[test]
fn check_lists_every_server_with_one_leader_and_reports_a_dead_one() {
    let (_ensemble, _, shown) =
        consensus::check_lists_every_server_and_reports_a_dead_follower::<ZkEnsemble>();
    assert!(!shown.contains("lock_operations"), "the lock works: {shown}");
    assert!(!shown.contains("no_leader"), "the leader serves: {shown}");
}
