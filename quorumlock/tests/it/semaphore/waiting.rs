//! Waiting for a permit: every waiter is served within its wait while
//! permits are released, and a release wakes a waiter at once (not at its
//! next poll).

use std::sync::Arc;
use std::time::Duration;

use quorumlock::{Redlock, Semaphore};
use quorumlock_testkit::{RedisServer, builder, eventually};
use tokio::time::Instant;

use super::{calls, queued};

const TTL: Duration = Duration::from_secs(10);

/// A retry delay far above every hand-off these tests measure: a waiter
/// served faster than it was woken by a release.
const SLOW_POLL: Duration = Duration::from_secs(5);

fn slow_polling(servers: &[RedisServer], wait: Duration) -> Redlock {
    let redlock = builder(servers).build().unwrap();
    let options = redlock.options().retry_delay(SLOW_POLL).wait(wait);
    redlock.with_options(options).unwrap()
}

/// Waits until `n` waiters stand in the semaphore's queue on every node.
async fn in_line(servers: &[RedisServer], name: &str, n: i64) {
    eventually("the waiters are in the queue", Duration::from_secs(5), || {
        servers.iter().all(|s| queued(s, name) == n)
    })
    .await;
}

#[tokio::test]
async fn a_release_wakes_the_waiter_at_once_not_at_its_next_poll() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let holder = builder(&servers).build().unwrap().semaphore("wake", 2).unwrap();
    let held = [
        holder.acquire(TTL).await.unwrap(),
        holder.acquire(TTL).await.unwrap(),
    ];
    let zadds = |s: &RedisServer| calls(s, "zadd");
    let before: Vec<i64> = servers.iter().map(zadds).collect();
    let pool = slow_polling(&servers, Duration::from_secs(20))
        .semaphore("wake", 2)
        .unwrap();
    let waiter = tokio::spawn(async move {
        let permit = pool.acquire(TTL).await.unwrap();
        (Instant::now(), permit)
    });
    in_line(&servers, "wake", 1).await;

    let [first, second] = held;
    let freed = second.index();
    let released = Instant::now();
    second.release().await.unwrap();
    let (served, permit) = waiter.await.unwrap();
    let gap = served - released;
    assert!(
        gap < Duration::from_secs(1),
        "served {gap:?} after the release: it polled"
    );
    assert_eq!(permit.index(), freed);
    // Served, it left the queue.
    eventually("the waiter left the queue", Duration::from_secs(5), || {
        servers.iter().all(|s| queued(s, "wake") == 0)
    })
    .await;
    // One entry per waiter and node, whatever the number of permits.
    let added: Vec<i64> = servers.iter().zip(before).map(|(s, b)| zadds(s) - b).collect();
    assert_eq!(added, [1, 1, 1]);
    drop((first, permit));
}

/// K holders and 2K waiters (each its own client); every holder, the
/// waiters once served included, holds a moment and releases. Every waiter
/// is served within its wait, the first in line first, and only releases
/// wake them (a served waiter that polled would have waited the 5 s delay).
#[tokio::test]
async fn every_waiter_is_served_within_its_wait_while_permits_are_released() {
    const K: usize = 3;
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let holder = builder(&servers).build().unwrap().semaphore("turns", K).unwrap();
    let mut held = Vec::new();
    for _ in 0..K {
        held.push(holder.acquire(TTL).await.unwrap());
    }
    let wait = Duration::from_secs(15);
    let mut waiters = Vec::new();
    let sets_before: Vec<i64> = servers.iter().map(|s| calls(s, "set")).collect();
    let started = Instant::now();
    for n in 0..2 * K {
        let pool: Arc<Semaphore> = Arc::new(slow_polling(&servers, wait).semaphore("turns", K).unwrap());
        waiters.push(tokio::spawn(async move {
            let permit = pool.acquire(TTL).await.expect("served within the wait");
            let served = Instant::now();
            tokio::time::sleep(Duration::from_millis(30)).await;
            permit.release().await.unwrap();
            served
        }));
        // One at a time, so that their places in line are known.
        in_line(&servers, "turns", n as i64 + 1).await;
        // In line, a waiter sweeps the permits once more (a release before
        // it registered woke nobody), and that sweep may take a permit freed
        // meanwhile, ahead of the line. So the line is the only order once
        // that sweep is over: K refused `SET`s per node before registering
        // and K after.
        let sweeps_done = (n as i64 + 1) * 2 * K as i64;
        eventually("the waiter's sweeps are over", Duration::from_secs(5), || {
            servers
                .iter()
                .zip(&sets_before)
                .all(|(s, before)| calls(s, "set") - before >= sweeps_done)
        })
        .await;
    }
    let all_in_line = Instant::now();
    for permit in held {
        permit.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut served = Vec::new();
    for waiter in waiters {
        served.push(waiter.await.unwrap());
    }
    let last = served.iter().max().unwrap().duration_since(all_in_line);
    assert!(served.iter().all(|&at| at - started < wait));
    assert!(
        last < SLOW_POLL,
        "the last waiter was served {last:?} after the releases began"
    );
    assert_eq!(
        served.iter().min(),
        served.first(),
        "the first in line was not served first"
    );
}
