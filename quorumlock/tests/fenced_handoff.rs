//! Fenced waiters are handed the lock by the release, as plain ones are:
//! their attempts queue them where the resource is held, a release wakes the
//! first in line, and a waiter that takes the lock leaves every queue.

use std::time::Duration;

use quorumlock::{Guard, Redlock};
use quorumlock_testkit::{RedisServer, builder, eventually, get, int, start_nodes};
use tokio::time::Instant;

/// Polling so slow that a hand-off faster than it can only come from a
/// notification: the first poll of a waiter comes after >= 1 s.
const SLOW_POLL: Duration = Duration::from_secs(2);

const RESOURCE: &str = "stock:sku-1";

/// A fenced client whose polls are too slow to explain a fast hand-off.
fn fenced_slow_poller(servers: &[RedisServer]) -> Redlock {
    let redlock = builder(servers)
        .retry_delay(SLOW_POLL)
        .wait(Duration::from_secs(60))
        .build()
        .unwrap();
    redlock.with_options(redlock.options().fenced(true)).unwrap()
}

/// Waiters queued for [`RESOURCE`] on `server`.
fn queued(server: &RedisServer) -> i64 {
    int(server, &["ZCARD", &format!("quorumlock:waiters:{{{RESOURCE}}}")])
}

/// Takes [`RESOURCE`] (free) and waits until every node holds it, so that a
/// waiter is refused, and queued, everywhere.
async fn hold_everywhere(redlock: &Redlock, servers: &[RedisServer]) -> Guard {
    let guard = redlock
        .try_lock(RESOURCE, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the resource is free");
    eventually("every node holds the lock", Duration::from_secs(5), || {
        servers
            .iter()
            .all(|s| get(s, RESOURCE).as_deref() == Some(guard.token()))
    })
    .await;
    guard
}

#[tokio::test]
async fn fenced_waiters_get_each_release_far_below_the_polling_delay() {
    let servers = start_nodes(3);
    let holder = fenced_slow_poller(&servers);
    let mut guard = hold_everywhere(&holder, &servers).await;
    let mut last_fence = guard.fence_token().expect("fenced");
    let mut clients = Vec::new();
    for round in 0..4 {
        let waiter = fenced_slow_poller(&servers);
        let waiting = tokio::spawn(async move {
            let guard = waiter
                .lock(RESOURCE, Duration::from_secs(30))
                .await
                .expect("lock");
            (guard, Instant::now(), waiter)
        });
        for server in &servers {
            eventually("the fenced waiter is queued", Duration::from_secs(5), || {
                queued(server) == 1
            })
            .await;
        }
        let released = Instant::now();
        guard.release().await.expect("release");
        let (next, taken, waiter) = waiting.await.unwrap();
        let gap = taken - released;
        assert!(
            gap < SLOW_POLL / 20,
            "round {round}: hand-off took {gap:?}, a poll rather than the release's wake-up"
        );
        let fence = next.fence_token().expect("fenced");
        assert!(fence > last_fence, "fencing tokens grow with each holder");
        last_fence = fence;
        guard = next;
        clients.push(waiter);
    }
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_fenced_waiter_that_takes_the_lock_leaves_every_queue() {
    let servers = start_nodes(3);
    let holder = fenced_slow_poller(&servers);
    let guard = hold_everywhere(&holder, &servers).await;
    let waiter = fenced_slow_poller(&servers);
    let waiting = tokio::spawn(async move { waiter.lock(RESOURCE, Duration::from_secs(30)).await });
    for server in &servers {
        eventually("the fenced waiter is queued", Duration::from_secs(5), || {
            queued(server) == 1
        })
        .await;
    }
    guard.release().await.expect("release");
    let next = waiting.await.unwrap().expect("lock");
    for server in &servers {
        eventually("no queue entry is left", Duration::from_secs(5), || {
            queued(server) == 0
        })
        .await;
    }
    assert!(next.is_held());
    next.release().await.expect("release");
}
