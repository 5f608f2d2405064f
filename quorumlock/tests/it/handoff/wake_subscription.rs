//! The wake-up subscription: one per client and node, shared by all its
//! waiters, gone once no one waits, taken again after a node dropped it and
//! kept across back-to-back waits; a release that publishes nothing (another
//! library's) is still picked up by polling.

use std::time::Duration;

use quorumlock_testkit::{all_empty, builder, calls, client, eventually, int, set_foreign, start_nodes};
use tokio::time::Instant;

use super::{assert_woken, hold, queued, rare_poller, slow_poller, subscriptions, until_queued};

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

/// A waiter whose node confirms the subscription only after the waiter
/// stopped waiting for it (here: the node turns away new connections for a
/// while) may be queued and named by a release before it listens. It tries
/// again as soon as the subscription is confirmed, not a retry delay later.
#[tokio::test]
async fn a_subscription_confirmed_late_makes_the_waiter_try_again() {
    let servers = start_nodes(1);
    let holder = client(&servers);
    let guard = hold(&holder, &servers, "late").await;
    let redlock = rare_poller(&servers);
    // The waiter's request connection, opened while connections are let in.
    assert!(
        redlock
            .try_lock("late", Duration::from_secs(10))
            .await
            .unwrap()
            .is_none()
    );
    // One connection kept for the test itself, then no new one is accepted:
    // the waiter's subscriber cannot connect.
    let mut admin = redis::Client::open(servers[0].url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut admin_command = |args: &[&str]| -> redis::Value {
        let mut command = redis::cmd(args[0]);
        command.arg(&args[1..]);
        command.query(&mut admin).unwrap()
    };
    let clients: String = redis::from_redis_value(admin_command(&["CLIENT", "LIST"])).unwrap();
    admin_command(&[
        "CONFIG",
        "SET",
        "maxclients",
        &clients.lines().count().to_string(),
    ]);
    let waiter = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.lock("late", Duration::from_secs(10)).await }
    });
    let queue = "quorumlock:waiters:{late}";
    eventually("the waiter queued", Duration::from_secs(10), || {
        admin_command(&["ZCARD", queue]) == redis::Value::Int(1)
    })
    .await;
    // The release names the waiter, which does not listen yet.
    guard.release().await.unwrap();
    let let_in = Instant::now();
    admin_command(&["CONFIG", "SET", "maxclients", "10000"]);
    let next = waiter.await.unwrap().expect("the lock, once subscribed");
    // The subscriber retries its connection within a few seconds
    // (RESUBSCRIBE_BASE doubling).
    assert_woken(let_in);
    next.release().await.unwrap();
}
