//! The line of waiters per resource: a release wakes only the waiter at
//! its head (first come, first served, one attempt per hand-off), skips
//! entries whose waiter is gone, and a waiter that got the lock leaves every
//! node's line, also where the previous holder's release lags.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::{Proxy, all_empty, calls, client, eventually, get, int, start_nodes, urls};
use tokio::time::Instant;

use super::{SLOW_POLL, hold, queued, slow_poller, until_queued};

/// Waiters in separate clients (like separate processes), queued in a known
/// order: each release names the head of the queue, so only that waiter
/// retries (one SET per node per hand-off, no herd) and they are served in
/// the order they started waiting.
#[tokio::test]
async fn each_release_wakes_only_the_first_waiter_in_line() {
    let servers = start_nodes(3);
    let holder = client(&servers);
    let guard = hold(&holder, &servers, "line").await;
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut waiters = Vec::new();
    for i in 0..6 {
        let redlock = slow_poller(&servers);
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = redlock.lock("line", Duration::from_secs(10)).await.unwrap();
            order.lock().unwrap().push(i);
            guard.release().await.unwrap();
        }));
        // The next waiter comes after this one is in line on every node.
        until_queued(&servers, "line", i + 1, "the waiter queued").await;
    }
    let sets_before: Vec<u64> = servers.iter().map(|s| calls(s, "set")).collect();
    // Every wake-up the nodes publish, as a subscriber to all channels hears it.
    let mut connections: Vec<redis::Connection> = servers
        .iter()
        .map(|s| redis::Client::open(s.url()).unwrap().get_connection().unwrap())
        .collect();
    // (A `PubSub` unsubscribes when dropped: keep them.)
    let mut watchers: Vec<redis::PubSub> = connections.iter_mut().map(|c| c.as_pubsub()).collect();
    for watcher in &mut watchers {
        watcher.psubscribe("quorumlock:*").unwrap();
    }
    let started = Instant::now();
    guard.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2, 3, 4, 5],
        "first come, first served"
    );
    // Far below the first poll (>= 250 ms): every hand-off came from a
    // message, so the SET counts below include no polling.
    assert!(elapsed < Duration::from_millis(200), "{elapsed:?}");
    for (server, before) in servers.iter().zip(sets_before) {
        // One SET per hand-off: only the named waiter tried.
        assert_eq!(calls(server, "set") - before, 6, "one attempt per hand-off");
    }
    // Each wake-up goes to the channel of the named waiter's client only,
    // and every waiter was named (by at least one node; a node whose
    // release lagged behind may have named no one): six clients, six
    // channels.
    let mut clients = std::collections::HashSet::new();
    for watcher in &mut watchers {
        watcher
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        // Everything was published before the waiters returned.
        while let Ok(message) = watcher.get_message() {
            let payload: String = message.get_payload().unwrap();
            let (_token, member) = payload.split_once(' ').expect("<token> <member>");
            let client = member.split(':').nth(1).expect("<deadline>:<client>:<waiter>");
            assert_eq!(message.get_channel_name(), format!("quorumlock:wake:{client}"));
            clients.insert(client.to_owned());
        }
    }
    assert_eq!(
        clients.len(),
        6,
        "every waiter's client was woken on its own channel"
    );
    all_empty(&servers, Duration::from_secs(5)).await;
}

/// A queue entry whose deadline has passed (its waiter is gone) is skipped
/// by the release, which names the next live waiter: the hand-off is as
/// fast as without it.
#[tokio::test]
async fn a_release_skips_waiters_whose_deadline_passed() {
    let servers = start_nodes(3);
    let holder = client(&servers);
    let guard = hold(&holder, &servers, "stale").await;
    for server in &servers {
        // First in line (place 1), deadline in 1970.
        let queue = "quorumlock:waiters:{stale}";
        assert_eq!(int(server, &["ZADD", queue, "1", "1000:deadbeef"]), 1);
    }
    let redlock = slow_poller(&servers);
    let waiter = tokio::spawn(async move { redlock.lock("stale", Duration::from_secs(10)).await });
    for server in &servers {
        eventually(
            "the waiter queued behind the stale entry",
            Duration::from_secs(5),
            || queued(server, "stale") == 2,
        )
        .await;
    }
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(100),
        "named at once, not found by polling: {:?}",
        released.elapsed()
    );
    next.release().await.unwrap();
    all_empty(&servers, Duration::from_secs(5)).await;
}

/// A waiter that takes the lock leaves the queue on every node at once, also
/// on a node that refused it because the previous holder's release is still
/// on its way there (so that it still lists the waiter): the queues do not
/// keep a waiter that is served. Here the refusal is in before the majority.
#[tokio::test]
async fn a_waiter_that_takes_the_lock_leaves_every_queue_even_where_releases_lag() {
    // The waiter reaches the first node through the slow proxy, so that the
    // third node's refusal is in before the first node's grant completes the
    // waiter's majority.
    waiter_leaves_a_lagging_queue("lag", 0).await;
}

/// As above, but the lagging node's refusal comes after the majority took
/// the lock, when the attempt no longer waits for it: the request that gets
/// the refusal takes the waiter off that queue itself. (The late release
/// pops only the head of that queue, which is a waiter served earlier when
/// the node lags by more than one hand-off.)
#[tokio::test]
async fn a_waiter_refused_after_its_majority_leaves_that_queue_too() {
    // The waiter reaches the lagging (third) node through the slow proxy.
    waiter_leaves_a_lagging_queue("late", 2).await;
}

/// A holder whose release to the third node is held back 2 s, and a waiter
/// that reaches node `slow` with 50 ms of latency each way; asserts that the
/// waiter, served by the other nodes' messages, leaves every queue within
/// 1 s, before the lagging release could pop it.
async fn waiter_leaves_a_lagging_queue(resource: &'static str, slow: usize) {
    let servers = start_nodes(3);
    // The holder reaches the third node through a proxy that will delay its
    // release there.
    let proxy = Proxy::start(servers[2].port());
    let slow_proxy = Proxy::start(servers[slow].port());
    slow_proxy.set_latency(Duration::from_millis(50));
    let holder = Redlock::builder()
        .nodes([servers[0].url(), servers[1].url(), proxy.url()])
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = hold(&holder, &servers, resource).await;
    let mut urls = urls(&servers);
    urls[slow] = slow_proxy.url();
    let redlock = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(SLOW_POLL)
        .wait(Duration::from_secs(60))
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move {
        let guard = redlock.lock(resource, Duration::from_secs(10)).await.unwrap();
        (redlock, guard)
    });
    until_queued(&servers, resource, 1, "the waiter queued").await;
    let old = guard.token().to_owned();
    let lag = Duration::from_secs(2);
    proxy.set_latency(lag);
    let released = Instant::now();
    guard.release().await.unwrap();
    let (_redlock, guard) = waiter.await.unwrap();
    // Served by a message from the first two nodes; the third still holds
    // the old lock and refused.
    assert_eq!(get(&servers[2], resource), Some(old), "the release there lags");
    assert_eq!(get(&servers[0], resource).as_deref(), Some(guard.token()));
    for server in &servers {
        eventually("the waiter left the queue", Duration::from_secs(1), || {
            queued(server, resource) == 0
        })
        .await;
    }
    assert!(
        released.elapsed() < lag,
        "checked before the lagging release arrived"
    );
    drop(proxy);
    guard.release().await.unwrap();
}
