//! What the tests of the binary on the two consensus stores, an etcd
//! cluster and a ZooKeeper ensemble, share: the fixture ([`Store`], each
//! store made one in its own module with [`store!`]), the commands over a
//! store, the logs of commands run under a lock, and the test bodies that
//! hold for both stores, each run by a test of each store's module.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use quorumlock_testkit::cli::{Binary, Running, exit, scratch, text, wait_for_line};

pub(crate) const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// How long a command may take to get to its first line: a JVM ensemble on
/// a loaded machine answers its first requests slowly.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(20);

/// How long a holder may take to notice that its lock was deleted: its
/// keep-alive or heartbeat looks several times per lease or session, and
/// a loaded machine delays it.
const LOSS_LIMIT: Duration = Duration::from_secs(10);

/// A consensus store the test kit starts on free loopback ports, as the
/// shared test bodies use it.
pub(crate) trait Store: Sized {
    /// Its name in scratch directories ("etcd").
    const NAME: &str;
    /// What `check` ends with when every server is fit.
    const FIT: &str;
    /// The role a store of one server shows in `check`'s row.
    const ALONE: &str;
    fn start(servers: usize) -> Self;
    /// The URL the tests give quorumlock.
    fn nodes(&self) -> String;
    /// What the store holds for the lock on `key`, each entry starting
    /// with its holder's token (etcd: the values of the lock's keys;
    /// ZooKeeper: the names of its lock nodes); empty when it is free.
    fn entries(&self, key: &str) -> Vec<String>;
    fn client_port(&self, i: usize) -> u16;
    /// The index of the leader, once the servers agree on one.
    fn leader(&self) -> usize;
    /// SIGKILLs server `i` (a crash).
    fn kill(&mut self, i: usize);
}

/// Makes a test kit store a [`Store`]: its own methods under the trait's
/// names (they are the same), and the words, URL and entries given.
macro_rules! store {
    ($store:ident {
        name: $name:literal,
        fit: $fit:literal,
        alone: $alone:literal,
        nodes: $nodes:expr,
        entries: $entries:expr $(,)?
    }) => {
        impl $crate::consensus::Store for $store {
            const NAME: &str = $name;
            const FIT: &str = $fit;
            const ALONE: &str = $alone;
            fn start(servers: usize) -> Self {
                $store::start(servers)
            }
            fn nodes(&self) -> String {
                ($nodes)(self)
            }
            fn entries(&self, key: &str) -> Vec<String> {
                ($entries)(self, key)
            }
            fn client_port(&self, i: usize) -> u16 {
                $store::client_port(self, i)
            }
            fn leader(&self) -> usize {
                $store::leader(self)
            }
            fn kill(&mut self, i: usize) {
                $store::kill(self, i)
            }
        }
    };
}
pub(crate) use store;

/// `quorumlock ARGS --nodes URL`: the URL on the command line, where clap
/// splits it at the commas and quorumlock joins the servers back.
pub(crate) fn with_nodes_flag(store: &impl Store, args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.args(args).args(["--nodes", &store.nodes()]);
    cmd
}

/// `quorumlock ARGS` over `store` (its URL in `QUORUMLOCK_NODES`).
pub(crate) fn quorumlock(store: &impl Store, args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(&[]);
    cmd.env("QUORUMLOCK_NODES", store.nodes()).args(args);
    cmd
}

/// `quorumlock run ARGS -- sh -c SCRIPT` over `store`, running.
pub(crate) fn run(store: &impl Store, args: &[&str], script: &str) -> Running {
    let mut cmd = quorumlock(store, &["run"]);
    cmd.args(args).args(["--", "sh", "-c", script]);
    Running::spawn(cmd)
}

/// A shell command that appends `start NS` and `end NS` (wall clock) to
/// `log` around `sleep seconds`.
pub(crate) fn recorded(log: &Path, seconds: f64) -> String {
    let log = log.display();
    format!("echo start $(date +%s%N) >> {log}; sleep {seconds}; echo end $(date +%s%N) >> {log}")
}

/// The `(start, end)` intervals in the logs, sorted. A start without an
/// end (a killed command) ends at `killed_at`; without one, every command
/// must have ended.
pub(crate) fn intervals(logs: &[&Path], killed_at: Option<u128>) -> Vec<(u128, u128)> {
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
            let end = killed_at.unwrap_or_else(|| panic!("a command did not end: {text}"));
            all.push((start, end));
        }
    }
    all.sort_unstable();
    all
}

/// Two holders at once show as overlapping intervals: their times come
/// from the one wall clock of this machine.
pub(crate) fn assert_disjoint(intervals: &[(u128, u128)]) {
    for pair in intervals.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "two holders at once: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
}

/// A lock held by a `run` on a store of one server: `status` and `check
/// --key` show its holder's token, a wrong token deletes nothing, and
/// `unlock` frees it: the store holds nothing for it, `status` says free,
/// and the holder, finding its lock gone, stops its command. `unlock`
/// gives the arguments of that `unlock` from the holder's token.
pub(crate) fn held_lock_is_shown_and_freed<S: Store>(unlock: fn(&str) -> [&str; 2]) {
    let store = S::start(1);
    let dir = scratch(&format!("{}-status", S::NAME));
    let started = dir.join("started");
    let holding = format!("echo $QUORUMLOCK_LOCK_TOKEN >> {}; sleep 60", started.display());
    let mut holder = run(&store, &["--key", "report", "--ttl", "10s"], &holding);
    let token = wait_for_line(&started, START_LIMIT);
    let entries = store.entries("report");
    assert!(
        matches!(entries.as_slice(), [entry] if entry.starts_with(&token)),
        "one entry, the holder's: {entries:?}"
    );
    assert_shown_held(&store, &token);
    // Through renewals, the holder still holds: the loss below is the unlock's.
    let running = holder.child.try_wait().expect("try_wait").is_none();
    assert!(running, "the holder stopped: {}", holder.stderr());
    let wrong = ["--token", "0123456789abcdef0123456789abcdef"];
    let wrong = quorumlock(&store, &["unlock", "report"])
        .args(wrong)
        .output()
        .unwrap();
    let stderr = text(&wrong.stderr);
    assert_eq!(
        wrong.status.code(),
        Some(1),
        "another token deletes nothing: {stderr}"
    );
    assert_eq!(store.entries("report"), entries);
    let freed = quorumlock(&store, &["unlock", "report"])
        .args(unlock(&token))
        .output()
        .unwrap();
    assert_eq!(freed.status.code(), Some(0), "{}", text(&freed.stderr));
    assert_eq!(store.entries("report"), Vec::<String>::new());
    let status = quorumlock(&store, &["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(0), "free: {}", text(&status.stdout));
    let status = holder.wait(LOSS_LIMIT);
    assert_eq!(status.code(), Some(exit::LOST), "{}", holder.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `status` (table and JSON) and `check --key` name `token` as the holder
/// of "report"; `status` on another key finds it free.
fn assert_shown_held<S: Store>(store: &S, token: &str) {
    let status = quorumlock(store, &["status", "report"]).output().unwrap();
    assert_eq!(status.status.code(), Some(1), "held: {}", text(&status.stderr));
    let shown = text(&status.stdout);
    let held = format!("key \"report\": held by \"{token}\"");
    assert!(shown.contains(&held), "{shown}");
    let json = quorumlock(store, &["status", "report", "--json"])
        .output()
        .unwrap();
    let json = text(&json.stdout);
    assert!(json.contains(&format!("\"token\":\"{token}\"")), "{json}");
    let check = with_nodes_flag(store, &["check", "--key", "report"])
        .output()
        .unwrap();
    let shown = text(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{shown}{}", text(&check.stderr));
    assert!(shown.contains(S::ALONE), "{shown}");
    assert!(shown.contains(&format!("held by \"{token}\"")), "{shown}");
    let free = quorumlock(store, &["status", "other"]).output().unwrap();
    assert_eq!(free.status.code(), Some(0), "{}", text(&free.stdout));
}

/// `check` on three servers: a row for each in the URL's order, the
/// leader's saying so and the two others followers, all fit. Then, with a
/// follower dead, an error row, so status 1 as for a dead Redis node, but
/// a majority still serves. Returns the store, the dead follower and that
/// check's JSON, for what each store checks further.
pub(crate) fn check_lists_every_server_and_reports_a_dead_follower<S: Store>() -> (S, usize, String) {
    let mut store = S::start(3);
    let healthy = with_nodes_flag(&store, &["check"]).output().unwrap();
    let shown = text(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{shown}{}", text(&healthy.stderr));
    // The table's rows: the lines that start with their number.
    let rows: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 3, "{shown}");
    for (i, row) in rows.iter().enumerate() {
        let port = format!("127.0.0.1:{} ", store.client_port(i));
        assert!(row.contains(&port), "row {i} is server {i}: {shown}");
    }
    let leader = store.leader();
    assert!(rows[leader].contains(" leader "), "{shown}");
    let followers = rows.iter().filter(|r| r.contains(" follower ")).count();
    assert_eq!(followers, 2, "{shown}");
    assert!(shown.contains(S::FIT), "{shown}");
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    store.kill(follower);
    let degraded = quorumlock(&store, &["check", "--timeout", "1s", "--json"])
        .output()
        .unwrap();
    let shown = text(&degraded.stdout);
    assert_eq!(degraded.status.code(), Some(1), "a server is unusable: {shown}");
    assert!(shown.contains("\"code\":\"unreachable\""), "{shown}");
    assert!(shown.contains("\"usable\":2"), "{shown}");
    assert!(!shown.contains("no_majority"), "two of three serve: {shown}");
    (store, follower, shown)
}
