//! The harness that quorumlock's tests, benchmarks, examples and
//! `quorumlock demo` run on: real `redis-server` processes on free loopback
//! ports, the faults a lock has to survive, and a checker that looks for two
//! holders inside at once.
//!
//! Real servers rather than mocks, because what the lock promises depends on
//! what a real node does: its expiry clock, its script cache, its replies
//! when it is paused, killed or cut off.
//!
//! # Modules
//!
//! - [`server`]: one `redis-server` per [`RedisServer`], in a directory of
//!   its own, killed when dropped; kill, restart (with or without AOF
//!   persistence), SIGSTOP pauses, replicas, raw commands.
//! - [`pause`]: a [`pause::Paused`] process (SIGSTOP until dropped), frozen
//!   in every thread before the pause returns.
//! - [`proxy`]: a TCP [`Proxy`] in front of one node that adds latency,
//!   black-holes, refuses or resets connections, switchable while a test
//!   runs.
//! - [`skew`]: a [`SkewedClock`] for a server's wall clock (fast, slow,
//!   jumping), through an `LD_PRELOAD` shim; Linux only.
//! - [`stall`]: a process that stops itself at a known step (its first
//!   `fork` or `execvp`), through another such shim.
//! - [`fake`]: a node that answers garbage, the wrong type of reply, or
//!   closes the connection mid-reply.
//! - [`faults`]: a [`faults::Cluster`] of nodes built from the above and a
//!   [`faults::Schedule`] of fault actions applied to it.
//! - [`checker`]: contenders against a cluster while a schedule runs; its
//!   [`checker::Report`] counts the overlaps.
//! - [`panics`]: a [`PanicProbe`] for panics in spawned tasks, which tokio
//!   would swallow.
//! - [`etcd`]: an [`etcd::EtcdCluster`] of one or more real `etcd` members
//!   on free loopback ports, killed when dropped; kill, restart and SIGSTOP
//!   pauses of single members, the leader, `etcdctl` commands.
//! - [`zookeeper`]: a [`zookeeper::ZkEnsemble`] of one or three real
//!   ZooKeeper servers on free loopback ports, killed when dropped; kill,
//!   restart and SIGSTOP pauses of single servers, the leader (from
//!   `srvr`), the children of a znode.
//! - [`consensus_chaos`]: such a cluster or ensemble as a target of the
//!   checker, one [`consensus_chaos::ConsensusTarget`] for both stores.
//! - [`redis_cluster`]: a [`redis_cluster::RedisCluster`] of real
//!   `redis-server --cluster-enabled yes` nodes on free loopback ports
//!   (primaries and replicas, formed with `redis-cli --cluster create`),
//!   killed when dropped; kill, restart and SIGSTOP pauses of single nodes,
//!   the primary of a slot, a failover, a slot migration with its keys;
//!   [`redis_cluster_chaos`]: clusters as the members of a quorum, as a
//!   target of the checker.
//! - [`sentinel`]: a [`sentinel::SentinelSetup`] of a master, its replicas
//!   and sentinels on free loopback ports, killed when dropped; the master
//!   the sentinels name, a failover, kill and restart of data nodes.
//! - [`cli`]: running the `quorumlock` binary in tests: a command over
//!   some servers, a running quorumlock cleaned up after a failed assertion,
//!   the files its command writes, and process state from /proc.
//!
//! The crate root has the helpers most tests need: a client over some
//! servers ([`client`], [`builder`]), what a node holds ([`get`], [`pttl`],
//! [`dbsize`], [`leftovers`]), another owner's key ([`set_foreign`]), and
//! waits for conditions a test cannot time ([`eventually`], [`all_empty`]).
//!
//! # Example
//!
//! A lock over three local nodes, and what each node holds (`no_run`: it
//! needs `redis-server` on `PATH`):
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use quorumlock_testkit::{all_empty, client, get, start_nodes};
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let nodes = start_nodes(3);
//!     let redlock = client(&nodes);
//!     let guard = redlock.lock("report", Duration::from_secs(5)).await.expect("nodes up");
//!     // The lock returns at a majority; the third SET may still be on its way.
//!     assert!(nodes.iter().filter(|n| get(n, "report").as_deref() == Some(guard.token())).count() >= 2);
//!     guard.release().await.expect("release");
//!     all_empty(&nodes, Duration::from_secs(2)).await;
//! }
//! ```
//!
//! A chaos scenario: a majority of nodes crashes while contenders hold the
//! lock, and no two of them may be inside at once:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use quorumlock_testkit::Persistence;
//! use quorumlock_testkit::checker::Checker;
//! use quorumlock_testkit::faults::{Action, Cluster, Schedule};
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let cluster = Cluster::start(3, Persistence::AofAlways);
//!     let schedule = Schedule::new()
//!         .await_acquisition()
//!         .then(Action::Restart(vec![0, 1]))
//!         .wait(Duration::from_secs(1));
//!     let (report, _cluster) = Checker::new("restart a majority").run(cluster, schedule).await;
//!     report.assert_safe();
//! }
//! ```

#![warn(missing_docs)]

pub mod alloc;
pub mod checker;
pub mod cli;
pub mod consensus_chaos;
pub mod etcd;
pub mod fake;
pub mod faults;
mod members;
pub mod panics;
pub mod pause;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_cluster_chaos;
mod redis_proc;
pub mod sentinel;
pub mod server;
mod shim;
pub mod skew;
pub mod stall;
pub mod zookeeper;

use std::time::Duration;

pub use panics::PanicProbe;
pub use proxy::{Fault, Proxy};
use quorumlock::{Redlock, RedlockBuilder};
pub use server::{Persistence, RedisServer, pause_all, start_nodes, urls};
pub use skew::SkewedClock;

/// A builder over `servers` with a per-node timeout generous enough for a
/// loaded CI machine running many tests at once (tests about timeouts set
/// their own).
pub fn builder(servers: &[RedisServer]) -> RedlockBuilder {
    Redlock::builder()
        .nodes(urls(servers))
        .node_timeout(Duration::from_millis(500))
}

/// A client over `servers` with the test defaults of [`builder`].
pub fn client(servers: &[RedisServer]) -> Redlock {
    builder(servers).build().expect("valid test config")
}

/// Sends a command to `server` and returns its integer reply.
pub fn int(server: &RedisServer, args: &[&str]) -> i64 {
    let reply = server.command(args).expect("command");
    reply
        .strip_prefix(':')
        .and_then(|r| r.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{args:?}: expected an integer reply, got {reply:?}"))
}

/// The number of keys on `server`.
pub fn dbsize(server: &RedisServer) -> i64 {
    int(server, &["DBSIZE"])
}

/// The string value of `key` on `server`, if any.
pub fn get(server: &RedisServer, key: &str) -> Option<String> {
    let reply = server.command(&["GET", key]).expect("GET");
    if reply.starts_with("$-1") {
        return None;
    }
    let mut lines = reply.split("\r\n");
    assert!(
        lines.next().is_some_and(|l| l.starts_with('$')),
        "GET {key}: {reply:?}"
    );
    lines.next().map(str::to_owned)
}

/// The script commands `server` has executed so far: every form of `EVAL`,
/// `EVALSHA` and `FCALL`, sent alone or in a pipeline (scripts cannot call
/// scripts, so each is one request of a client).
pub fn script_calls(server: &RedisServer) -> u64 {
    const SCRIPT_COMMANDS: [&str; 6] = ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"];
    let reply = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    reply
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            SCRIPT_COMMANDS.contains(&name).then_some(rest)
        })
        .map(|rest| {
            rest.split(',')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("a call count")
        })
        .sum()
}

/// Remaining ttl of `key` on `server` in milliseconds (-2 when missing).
pub fn pttl(server: &RedisServer, key: &str) -> i64 {
    int(server, &["PTTL", key])
}

/// Sets `key` to `value` for `ttl_ms` on `server` (another owner's lock).
pub fn set_foreign(server: &RedisServer, key: &str, value: &str, ttl_ms: u64) {
    let reply = server
        .command(&["SET", key, value, "PX", &ttl_ms.to_string()])
        .expect("SET");
    assert!(reply.starts_with("+OK"), "SET {key}: {reply:?}");
}

/// How many times `server` executed `command` (from INFO commandstats).
pub fn calls(server: &RedisServer, command: &str) -> u64 {
    let reply = server.command(&["INFO", "commandstats"]).expect("INFO");
    let prefix = format!("cmdstat_{}:calls=", command.to_lowercase());
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits (blocking, polling every 20 ms) until `path` exists: a command
/// under test got that far. Panics once `limit` has passed.
pub fn wait_until_exists(path: &std::path::Path, limit: Duration) {
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `condition` every 10 ms until it holds; panics naming `what` once
/// `limit` has passed. For conditions that become true at a time the test
/// cannot know (a background release, a key's expiry on the server).
pub async fn eventually(what: &str, limit: Duration, condition: impl FnMut() -> bool) {
    assert!(
        holds_within(limit, condition).await,
        "timed out after {limit:?} waiting until {what}"
    );
}

/// Polls `condition` every 10 ms until it holds (true) or `limit` has
/// passed (false).
pub async fn holds_within(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while !condition() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Waits (up to `limit`) until no server holds any key.
/// On failure it names what was left on each node (key, type, ttl), so a
/// leak can be told from a key that is merely slow to expire.
pub async fn all_empty(servers: &[RedisServer], limit: Duration) {
    if !holds_within(limit, || servers.iter().all(|s| dbsize(s) == 0)).await {
        let left: Vec<String> = servers.iter().map(leftovers).collect();
        panic!("timed out after {limit:?} waiting until every node is empty; left: {left:?}");
    }
}

/// Every key on `server` with its type and remaining ttl (ms), for failure
/// messages.
pub fn leftovers(server: &RedisServer) -> String {
    let described = (|| -> redis::RedisResult<Vec<String>> {
        let mut conn = redis::Client::open(server.url())?.get_connection()?;
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn)?;
        keys.into_iter()
            .map(|key| {
                let kind: String = redis::cmd("TYPE").arg(&key).query(&mut conn)?;
                let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn)?;
                let members: Vec<String> = if kind == "zset" {
                    redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(&mut conn)?
                } else {
                    Vec::new()
                };
                Ok(format!("{key} ({kind}, pttl {ttl}) {members:?}"))
            })
            .collect()
    })();
    format!("port {}: {described:?}", server.port())
}

/// How long [`warm_up`] waits for every node to answer.
pub const WARM_UP_LIMIT: Duration = Duration::from_secs(5);

/// Takes and releases a throwaway lock, then waits until every node has
/// answered, so that `redlock` has its connections to every node before a
/// test slows, freezes or breaks one. (The lock returns at a majority: the
/// last node's connection may still be opening, and once a test adds
/// latency or freezes that node, its handshake may never finish.)
pub async fn warm_up(redlock: &Redlock) {
    let guard = redlock
        .try_lock("warm", Duration::from_secs(5))
        .await
        .expect("healthy nodes")
        .expect("nothing holds the warm-up key");
    guard.release().await.expect("release");
    let deadline = tokio::time::Instant::now() + WARM_UP_LIMIT;
    loop {
        let inspection = redlock.inspect("warm").await.expect("inspect the warm-up key");
        let failed: Vec<_> = inspection
            .nodes
            .iter()
            .filter(|node| matches!(node.state, quorumlock::KeyState::Failed(_)))
            .map(|node| node.node.clone())
            .collect();
        if failed.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "warm-up: no answer from {failed:?} within {WARM_UP_LIMIT:?}"
        );
    }
}
