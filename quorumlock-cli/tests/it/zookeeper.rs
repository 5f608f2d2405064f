//! The `quorumlock` binary on a ZooKeeper ensemble (feature `zookeeper`):
//! concurrent `run`s on one name, `status`, `unlock --force` and `check
//! --key` on a held lock, and `check` on a healthy and a degraded ensemble.
//! Against real ZooKeeper servers.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::cli::{Binary, Running, exit, scratch, text, wait_for_line};
use quorumlock_testkit::zookeeper::ZkEnsemble;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// The session the tests ask for: the ensemble's tick is 100 ms, and a
/// short session lets a lost lock be noticed within a second or two
/// instead of the default 10 s.
const SESSION: &str = "?session_timeout=2s";

/// How long a command may take to get to its first line: a JVM ensemble on
/// a loaded machine answers its first requests slowly.
const START_LIMIT: Duration = Duration::from_secs(20);

/// How long a holder may take to notice that its lock node was deleted:
/// its heartbeat looks several times per session (2 s), and a loaded
/// machine delays it.
const LOSS_LIMIT: Duration = Duration::from_secs(10);

/// How long a run with `--wait` may take in all: its queue of four short
/// commands, each ahead of it holding the lock a fraction of a second.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The ensemble's URL with the tests' session.
fn url(ensemble: &ZkEnsemble) -> String {
    format!("{}{SESSION}", ensemble.url())
}

/// `quorumlock ARGS --nodes URL`: the URL on the command line, where clap
/// splits it at the commas and quorumlock joins the servers back.
fn with_nodes_flag(ensemble: &ZkEnsemble, args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.args(args).args(["--nodes", &url(ensemble)]);
    cmd
}

/// `quorumlock ARGS` over `ensemble` (its URL in `QUORUMLOCK_NODES`).
fn quorumlock(ensemble: &ZkEnsemble, args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.env("QUORUMLOCK_NODES", url(ensemble)).args(args);
    cmd
}

/// A shell command that appends `start NS` and `end NS` (wall clock) to
/// `log` around `sleep seconds`.
fn recorded(log: &Path, seconds: f64) -> String {
    let log = log.display();
    format!("echo start $(date +%s%N) >> {log}; sleep {seconds}; echo end $(date +%s%N) >> {log}")
}

/// The `(start, end)` intervals in `log`, sorted; every start has its end.
fn intervals(log: &Path) -> Vec<(u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut all = Vec::new();
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
    assert_eq!(start, None, "a command did not end: {text}");
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
    let all = intervals(&log);
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

#[test]
fn status_and_check_show_the_holder_and_a_forced_unlock_frees_the_lock() {
    let ensemble = ZkEnsemble::start(1);
    let dir = scratch("zk-status");
    let started = dir.join("started");
    let holding = format!("echo $QUORUMLOCK_LOCK_TOKEN >> {}; sleep 60", started.display());
    let mut cmd = quorumlock(&ensemble, &["run", "--key", "report", "--ttl", "10s"]);
    cmd.args(["--", "sh", "-c", &holding]);
    let mut holder = Running::spawn(cmd);
    let token = wait_for_line(&started, START_LIMIT);
    let nodes = ensemble.children("/report");
    assert!(
        matches!(nodes.as_slice(), [node] if node.starts_with(&token)),
        "one lock node, the holder's: {nodes:?}"
    );
    let status = quorumlock(&ensemble, &["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(1), "held: {}", text(&status.stderr));
    let shown = text(&status.stdout);
    assert!(
        shown.contains(&format!("key \"report\": held by \"{token}\"")),
        "{shown}"
    );
    let check = with_nodes_flag(&ensemble, &["check", "--key", "report"])
        .output()
        .unwrap();
    let shown = text(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{shown}{}", text(&check.stderr));
    assert!(shown.contains(" standalone "), "{shown}");
    assert!(shown.contains(&format!("held by \"{token}\"")), "{shown}");
    // Through heartbeats on its 2 s session, the holder still holds: the
    // loss below is the unlock's.
    let running = holder.child.try_wait().expect("try_wait").is_none();
    assert!(running, "the holder stopped: {}", holder.stderr());
    let unlock = quorumlock(&ensemble, &["unlock", "report", "--force", "--yes"])
        .output()
        .unwrap();
    assert_eq!(unlock.status.code(), Some(0), "{}", text(&unlock.stderr));
    assert!(
        ensemble.children("/report").is_empty(),
        "{:?}",
        ensemble.children("/report")
    );
    let status = quorumlock(&ensemble, &["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(0), "free: {}", text(&status.stdout));
    // Its heartbeat finds the node gone: the holder stops its command.
    let status = holder.wait(LOSS_LIMIT);
    assert_eq!(status.code(), Some(exit::LOST), "{}", holder.stderr());
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

/// The table's server rows: the lines that start with their number.
fn server_rows(table: &str) -> Vec<&str> {
    table
        .lines()
        .filter(|line| line.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

#[test]
fn check_lists_every_server_with_one_leader_and_reports_a_dead_one() {
    let mut ensemble = ZkEnsemble::start(3);
    let healthy = with_nodes_flag(&ensemble, &["check"]).output().unwrap();
    let shown = text(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{shown}{}", text(&healthy.stderr));
    let rows = server_rows(&shown);
    assert_eq!(rows.len(), 3, "{shown}");
    for (i, row) in rows.iter().enumerate() {
        let port = format!("127.0.0.1:{} ", ensemble.client_port(i));
        assert!(row.contains(&port), "row {i} is server {i}: {shown}");
    }
    let leader = ensemble.leader();
    assert!(rows[leader].contains(" leader "), "{shown}");
    let followers = rows.iter().filter(|r| r.contains(" follower ")).count();
    assert_eq!(followers, 2, "{shown}");
    assert!(shown.contains("all servers fit for a ZooKeeper lock"), "{shown}");
    // One follower dead: an error row, so status 1 as for a dead Redis
    // node or etcd member, but a majority still serves under the leader.
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    ensemble.kill(follower);
    let degraded = quorumlock(&ensemble, &["check", "--timeout", "1s", "--json"])
        .output()
        .unwrap();
    let shown = text(&degraded.stdout);
    assert_eq!(degraded.status.code(), Some(1), "a server is unusable: {shown}");
    assert!(!shown.contains("lock_operations"), "the lock works: {shown}");
    assert!(shown.contains("\"code\":\"unreachable\""), "{shown}");
    assert!(shown.contains("\"usable\":2"), "{shown}");
    assert!(!shown.contains("no_majority"), "two of three serve: {shown}");
    assert!(!shown.contains("no_leader"), "the leader serves: {shown}");
}
