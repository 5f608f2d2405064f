//! Waiters taking turns on one resource: each release reaches the next
//! waiter far below the polling delay, whether the waiters share one client
//! or have one each, and over many rounds no waiter starves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::{Proxy, start_nodes};
use tokio::time::Instant;

use super::{assert_woken, hold, rare_poller, slow_poller, until_queued};

/// Runs `waiters` tasks that take turns on one resource for `rounds` each; a
/// task that released waits until someone else acquired before it queues
/// again, so every hand-off goes to a waiter. Returns the hand-off gaps
/// (release returned -> next acquisition returned) and per-task counts.
async fn take_turns(clients: Vec<Redlock>, rounds: usize) -> (Vec<Duration>, Vec<usize>) {
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let gaps: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let total = clients.len() * rounds;
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|redlock| {
            let (released_at, gaps, acquisitions) = (
                Arc::clone(&released_at),
                Arc::clone(&gaps),
                Arc::clone(&acquisitions),
            );
            tokio::spawn(async move {
                for round in 0..rounds {
                    let guard = redlock
                        .lock("turns", Duration::from_secs(10))
                        .await
                        .expect("lock");
                    if let Some(at) = released_at.lock().unwrap().take() {
                        gaps.lock().unwrap().push(at.elapsed());
                    }
                    let mine = acquisitions.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.release().await.expect("release");
                    *released_at.lock().unwrap() = Some(Instant::now());
                    // Rejoin only after someone else acquired (unless only
                    // this task has rounds left).
                    let mine_left = rounds - round - 1;
                    while acquisitions.load(Ordering::SeqCst) == mine && total - mine > mine_left {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                rounds
            })
        })
        .collect();
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.unwrap());
    }
    let mut gaps = gaps.lock().unwrap().clone();
    gaps.sort();
    (gaps, counts)
}

fn summary(gaps: &[Duration]) -> (Duration, Duration) {
    (gaps[gaps.len() / 2], gaps[gaps.len() * 9 / 10])
}

#[tokio::test]
async fn sixteen_waiters_of_one_client_get_each_release_far_below_the_polling_delay() {
    let servers = start_nodes(3);
    let redlock = slow_poller(&servers);
    let (gaps, counts) = take_turns(vec![redlock; 16], 4).await;
    let (p50, p90) = summary(&gaps);
    println!(
        "one client, 16 waiters: {} hand-offs, gap p50 {p50:?} p90 {p90:?}",
        gaps.len()
    );
    assert_eq!(counts.iter().sum::<usize>(), 64);
    assert!(p50 < Duration::from_millis(20), "gap p50 {p50:?}");
    assert!(p90 < Duration::from_millis(50), "gap p90 {p90:?}");
}

#[tokio::test]
async fn sixteen_waiters_with_their_own_clients_get_each_release_far_below_the_polling_delay() {
    let servers = start_nodes(3);
    let clients = (0..16).map(|_| slow_poller(&servers)).collect();
    let (gaps, _) = take_turns(clients, 3).await;
    let (p50, p90) = summary(&gaps);
    println!(
        "16 clients: {} hand-offs, gap p50 {p50:?} p90 {p90:?}",
        gaps.len()
    );
    assert!(p50 < Duration::from_millis(20), "gap p50 {p50:?}");
    assert!(p90 < Duration::from_millis(50), "gap p90 {p90:?}");
}

#[tokio::test]
async fn no_waiter_starves_over_many_rounds() {
    let servers = start_nodes(3);
    let redlock = slow_poller(&servers);
    let counts = Arc::new(Mutex::new(vec![0usize; 8]));
    let stop = Instant::now() + Duration::from_secs(2);
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (redlock, counts) = (redlock.clone(), Arc::clone(&counts));
            tokio::spawn(async move {
                while Instant::now() < stop {
                    let guard = redlock.lock("fair", Duration::from_secs(10)).await.unwrap();
                    counts.lock().unwrap()[i] += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let counts = counts.lock().unwrap().clone();
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    println!("8 waiters for 2 s: acquisitions per waiter min {min} max {max}: {counts:?}");
    assert!(*min >= 1, "a waiter starved: {counts:?}");
}

/// A release reaches the nodes one after another. The waiter is woken by the
/// first node's message, and its attempt may reach the other nodes before
/// the release does there (here: the holder's connections to two of the
/// three nodes are slow), and be refused. The same release's messages from
/// those nodes come after the waiter woke, and wake it again: it takes the
/// lock as soon as the release has reached a majority, not a retry delay
/// later.
#[tokio::test]
async fn a_waiter_that_woke_before_the_release_reached_a_majority_is_woken_again() {
    const SLOW: Duration = Duration::from_millis(150);
    let servers = start_nodes(3);
    // The holder reaches node 0 directly, nodes 1 and 2 through proxies.
    let proxies: Vec<Proxy> = servers[1..].iter().map(|s| Proxy::start(s.port())).collect();
    let holder = Redlock::builder()
        .nodes([servers[0].url(), proxies[0].url(), proxies[1].url()])
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = hold(&holder, &servers, "relay").await;
    let redlock = rare_poller(&servers);
    let waiter = tokio::spawn(async move { redlock.lock("relay", Duration::from_secs(10)).await });
    until_queued(&servers, "relay", 1, "the waiter queued").await;
    for proxy in &proxies {
        proxy.set_latency(SLOW);
    }
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = waiter.await.unwrap().expect("handed the lock");
    assert_woken(released);
    next.release().await.unwrap();
}
