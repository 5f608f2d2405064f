//! Fast hand-off: waiters are woken by the holder's release notification,
//! share one subscription per node, clean up after themselves, and still see
//! releases that send no notification.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Guard, Redlock};
use quorumlock_testkit::{
    Proxy, RedisServer, all_empty, builder, calls, client, eventually, get, int, set_foreign, start_nodes,
    urls,
};
use tokio::time::Instant;

/// Polling so slow that a hand-off faster than it can only come from a
/// notification: the first poll of a waiter comes after >= 125 ms.
const SLOW_POLL: Duration = Duration::from_secs(2);

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

#[tokio::test]
async fn waiters_share_one_subscription_per_node_and_leave_none_behind() {
    let servers = start_nodes(3);
    let holder = client(&servers);
    let guard = hold(&holder, &servers, "shared").await;
    let redlock = slow_poller(&servers);
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let redlock = redlock.clone();
            tokio::spawn(async move { redlock.lock("shared", Duration::from_secs(10)).await })
        })
        .collect();
    for server in &servers {
        eventually(
            "every node has the waiters' subscription",
            Duration::from_secs(5),
            || subscriptions(server) == 1,
        )
        .await;
    }
    // Five waiters, one subscription per node, five places in each queue.
    for server in &servers {
        eventually("every waiter queued", Duration::from_secs(5), || {
            queued(server, "shared") == 5
        })
        .await;
        assert_eq!(subscriptions(server), 1);
    }
    // Cancelled waiters unsubscribe and leave the queue.
    for waiter in &waiters {
        waiter.abort();
    }
    for server in &servers {
        eventually("the channel is unsubscribed", Duration::from_secs(5), || {
            subscriptions(server) == 0
        })
        .await;
        eventually("the queue is empty", Duration::from_secs(5), || {
            queued(server, "shared") == 0
        })
        .await;
    }
    // And so do waiters that got the lock.
    let next = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock("shared", Duration::from_secs(10)).await }
    });
    for server in &servers {
        eventually("the new waiter subscribed", Duration::from_secs(5), || {
            subscriptions(server) == 1
        })
        .await;
    }
    guard.release().await.unwrap();
    next.await.unwrap().unwrap().release().await.unwrap();
    for server in &servers {
        eventually("no subscription is left", Duration::from_secs(5), || {
            subscriptions(server) == 0
        })
        .await;
    }
    // Nothing left behind: no lock key, no queue.
    all_empty(&servers, Duration::from_secs(5)).await;
}

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

#[tokio::test]
async fn a_release_without_notification_is_still_picked_up_by_polling() {
    let servers = start_nodes(3);
    for server in &servers {
        set_foreign(server, "legacy", "other-library", 30_000);
    }
    let redlock = builder(&servers)
        .retry_delay(Duration::from_millis(200))
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move { redlock.lock("legacy", Duration::from_secs(10)).await });
    for server in &servers {
        eventually("the waiter subscribed", Duration::from_secs(5), || {
            subscriptions(server) == 1
        })
        .await;
    }
    // Another library releases with a plain owner-checked DEL: no message.
    let released = Instant::now();
    for server in &servers {
        assert_eq!(int(server, &["DEL", "legacy"]), 1);
    }
    let guard = waiter.await.unwrap().expect("picked up by polling");
    // Polling delays are jittered around at most the 200 ms retry delay.
    assert!(
        released.elapsed() < Duration::from_millis(600),
        "{:?}",
        released.elapsed()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_node_that_drops_the_subscription_is_resubscribed() {
    let mut servers = start_nodes(3);
    let holder = client(&servers);
    let guard = hold(&holder, &servers, "resub").await;
    let redlock = slow_poller(&servers);
    let waiter = tokio::spawn(async move { redlock.lock("resub", Duration::from_secs(10)).await });
    eventually("subscribed", Duration::from_secs(5), || {
        subscriptions(&servers[0]) == 1
    })
    .await;
    servers[0].restart();
    assert_eq!(subscriptions(&servers[0]), 0, "a fresh server has no subscribers");
    eventually("resubscribed after the restart", Duration::from_secs(5), || {
        subscriptions(&servers[0]) == 1
    })
    .await;
    // The holder still has a majority (nodes 1 and 2); its release reaches the waiter.
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(100),
        "{:?}",
        released.elapsed()
    );
    next.release().await.unwrap();
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

/// A client whose last waiter just got its lock, and that waits again right
/// away (here on another resource), keeps its subscription instead of
/// unsubscribing and subscribing again on every node; a moment after no one
/// waits, nothing is subscribed.
#[tokio::test]
async fn a_client_that_waits_again_soon_keeps_its_subscription() {
    let servers = start_nodes(3);
    let holder = client(&servers);
    let first = hold(&holder, &servers, "again:a").await;
    let second = hold(&holder, &servers, "again:b").await;
    let redlock = slow_poller(&servers);
    let waiter = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock("again:a", Duration::from_secs(10)).await.unwrap() }
    });
    until_queued(&servers, "again:a", 1, "the waiter queued").await;
    let subscribes: Vec<u64> = servers.iter().map(|s| calls(s, "subscribe")).collect();
    assert_eq!(subscribes, vec![1, 1, 1], "one subscription per node");
    first.release().await.unwrap();
    let a = waiter.await.unwrap();
    // The client's last waiter is gone; it waits again at once.
    let waiter = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock("again:b", Duration::from_secs(10)).await.unwrap() }
    });
    until_queued(&servers, "again:b", 1, "the waiter queued").await;
    let started = Instant::now();
    second.release().await.unwrap();
    let b = waiter.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "woken by a message"
    );
    for server in &servers {
        assert_eq!(calls(server, "subscribe"), 1, "not subscribed again");
        assert_eq!(calls(server, "unsubscribe"), 0, "not unsubscribed meanwhile");
    }
    a.release().await.unwrap();
    b.release().await.unwrap();
    for server in &servers {
        eventually("nothing subscribed", Duration::from_secs(5), || {
            subscriptions(server) == 0
        })
        .await;
    }
}
