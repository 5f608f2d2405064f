//! Fast hand-off: waiters are woken by the holder's release notification,
//! share one subscription per node, clean up after themselves, and still see
//! releases that send no notification.
//!
//! One concern per module: `taking_turns` (how fast and how fairly the lock
//! passes between waiters), `wake_subscription` (the pub/sub channel that
//! carries the wake-ups, and polling where none comes) and `wait_queue` (the
//! per-resource line of waiters that a release names its successor from);
//! `fenced` (fenced waiters, handed the lock the same way).

mod fenced;
mod taking_turns;
mod wait_queue;
mod wake_subscription;

use std::time::Duration;

use quorumlock::{Guard, Redlock};
use quorumlock_testkit::{RedisServer, builder, eventually, get, int};
use tokio::time::Instant;

/// Polling so slow that a hand-off faster than it can only come from a
/// notification: the first poll of a waiter comes after >= 125 ms.
const SLOW_POLL: Duration = Duration::from_secs(2);

/// Polling slower than every wake-up path of these tests, a subscriber's
/// reconnection included: a waiter's first poll comes after >= 10 s.
const RARE_POLL: Duration = Duration::from_secs(20);

/// A waiting client that polls only every [`RARE_POLL`], so that a hand-off
/// within seconds can only come from a wake-up.
fn rare_poller(servers: &[RedisServer]) -> Redlock {
    builder(servers)
        .retry_delay(RARE_POLL)
        .wait(RARE_POLL * 3)
        .build()
        .unwrap()
}

/// Asserts that a waiter handed the lock came well before its first poll
/// after `since` could have: it was woken.
fn assert_woken(since: Instant) {
    assert!(
        since.elapsed() < RARE_POLL / 4,
        "the waiter came after {:?}: it polled",
        since.elapsed()
    );
}

/// Pub/sub subscriptions of quorumlock clients on `server`: one per client
/// that has waiters (on its channel `quorumlock:wake:<client id>`), none
/// per waiter or per resource.
fn subscriptions(server: &RedisServer) -> i64 {
    let reply = server.command(&["PUBSUB", "CHANNELS", "quorumlock:*"]).unwrap();
    // *N\r\n then $len\r\n<channel>\r\n for each channel.
    let channels: Vec<&str> = reply
        .lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .collect();
    channels
        .iter()
        .map(|channel| {
            assert!(channel.starts_with("quorumlock:wake:"), "{channel}");
            let reply = server.command(&["PUBSUB", "NUMSUB", channel]).unwrap();
            // *2\r\n$N\r\n<channel>\r\n:<count>\r\n
            reply
                .lines()
                .find_map(|l| l.strip_prefix(':'))
                .and_then(|n| n.trim().parse::<i64>().ok())
                .unwrap_or_else(|| panic!("PUBSUB NUMSUB reply {reply:?}"))
        })
        .sum()
}

/// Waiters queued for `resource` on `server`.
fn queued(server: &RedisServer, resource: &str) -> usize {
    let count = int(server, &["ZCARD", &format!("quorumlock:waiters:{{{resource}}}")]);
    usize::try_from(count).expect("ZCARD is never negative")
}

/// A waiting client whose polls are so slow (see [`SLOW_POLL`]) that a fast
/// hand-off can only come from a message.
fn slow_poller(servers: &[RedisServer]) -> Redlock {
    builder(servers)
        .retry_delay(SLOW_POLL)
        .wait(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Takes `resource`, which must be free, for 30 s, and waits until every
/// node holds it. `try_lock` returns at a majority; a waiter whose attempt
/// reached the last node before the holder's SET would be granted there
/// (and not queued) instead of refused, which the tests below do not expect.
async fn hold(redlock: &Redlock, servers: &[RedisServer], resource: &str) -> Guard {
    let guard = redlock
        .try_lock(resource, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the resource is free");
    eventually("every node holds the lock", Duration::from_secs(5), || {
        servers
            .iter()
            .all(|s| get(s, resource).as_deref() == Some(guard.token()))
    })
    .await;
    guard
}

/// Waits until `count` waiters are queued for `resource` on every node.
async fn until_queued(servers: &[RedisServer], resource: &str, count: usize, what: &str) {
    for server in servers {
        eventually(what, Duration::from_secs(5), || queued(server, resource) == count).await;
    }
}
