//! Shared test harness: real `redis-server` processes and small helpers.
//!
//! Fault injection for the chaos suite: [`proxy`] (latency, black hole,
//! refusal, resets between a client and one node), [`skew`] (a node's wall
//! clock running fast, slow or jumping), [`server`] (kill, restart with or
//! without AOF, SIGSTOP pauses) and [`fake`] (a node that answers garbage or
//! closes connections mid-reply). [`faults`] scripts these into schedules,
//! and [`checker`] runs contenders against them and looks for two holders
//! inside at once. [`panics`] catches panics in spawned tasks.

pub mod checker;
pub mod fake;
pub mod faults;
pub mod panics;
pub mod proxy;
pub mod server;
pub mod skew;

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

/// Takes and releases a throwaway lock, so that `redlock` has its
/// connections to every node before a test freezes or breaks one.
pub async fn warm_up(redlock: &Redlock) {
    let guard = redlock
        .try_lock("warm", Duration::from_secs(5))
        .await
        .expect("healthy nodes")
        .expect("nothing holds the warm-up key");
    guard.release().await.expect("release");
}
