//! The semaphore: K permits as K locks over the Redis nodes.
//!
//! One concern per module: `basics` (names, validation, permits as locks,
//! fencing per permit), `k_holders` (at most K holders at any instant while
//! a minority of nodes crashes, pauses or drops off the network, checked
//! over the holders' recorded history) and `waiting` (waiters served within
//! their wait, woken by releases rather than by polling).

mod basics;
mod k_holders;
mod waiting;

use quorumlock_testkit::RedisServer;

/// Members of the queue of waiters of semaphore `name` (one for all its
/// permits) on `server`.
fn queued(server: &RedisServer, name: &str) -> i64 {
    let key = format!("quorumlock:waiters:{{{name}}}:permits");
    quorumlock_testkit::int(server, &["ZCARD", &key])
}

/// Calls of `command` on `server` so far (`INFO commandstats`; calls from
/// scripts included).
fn calls(server: &RedisServer, command: &str) -> i64 {
    let info = server.command(&["INFO", "commandstats"]).expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}
