//! Fenced waiters are handed the lock by the release, as plain ones are:
//! their attempts queue them where the resource is held, a release wakes the
//! first in line, and a waiter that takes the lock leaves every queue.

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::{RedisServer, start_nodes};
use tokio::time::Instant;

use super::{SLOW_POLL, hold, slow_poller, until_queued};

const RESOURCE: &str = "stock:sku-1";

/// A fenced client whose polls are too slow to explain a fast hand-off.
fn fenced_slow_poller(servers: &[RedisServer]) -> Redlock {
    let redlock = slow_poller(servers);
    redlock.with_options(redlock.options().fenced(true)).unwrap()
}

#[tokio::test]
async fn fenced_waiters_get_each_release_far_below_the_polling_delay() {
    let servers = start_nodes(3);
    let holder = fenced_slow_poller(&servers);
    let mut guard = hold(&holder, &servers, RESOURCE).await;
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
        until_queued(&servers, RESOURCE, 1, "the fenced waiter is queued").await;
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
    let guard = hold(&holder, &servers, RESOURCE).await;
    let waiter = fenced_slow_poller(&servers);
    let waiting = tokio::spawn(async move { waiter.lock(RESOURCE, Duration::from_secs(30)).await });
    until_queued(&servers, RESOURCE, 1, "the fenced waiter is queued").await;
    guard.release().await.expect("release");
    let next = waiting.await.unwrap().expect("lock");
    until_queued(&servers, RESOURCE, 0, "no queue entry is left").await;
    assert!(next.is_held());
    next.release().await.expect("release");
}
