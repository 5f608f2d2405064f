//! Two or more owners: exactly one wins, and nobody can touch another's lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::{
    RedisServer, all_empty, builder, calls, client, eventually, get, pttl, set_foreign, start_nodes,
};
use tokio::time::Instant;

#[tokio::test]
async fn two_clients_contend_and_exactly_one_wins() {
    let servers = start_nodes(5);
    // Separate clients: separate connections, as two processes would have.
    let (a, b) = (client(&servers), client(&servers));
    let ttl = Duration::from_secs(10);
    for round in 0..40 {
        let resource = format!("stock:sku-{round}");
        let (ra, rb) = tokio::join!(a.try_lock(&resource, ttl), b.try_lock(&resource, ttl));
        let (ga, gb) = (ra.expect("healthy nodes"), rb.expect("healthy nodes"));
        assert!(
            ga.is_some() != gb.is_some(),
            "round {round}: exactly one of two contenders must win on 5 nodes (a: {}, b: {})",
            ga.is_some(),
            gb.is_some()
        );
        let winner = ga.or(gb).unwrap();
        let values: Vec<Option<String>> = servers.iter().map(|s| get(s, &resource)).collect();
        let held = values
            .iter()
            .filter(|v| v.as_deref() == Some(winner.token()))
            .count();
        assert!(
            held >= 3,
            "round {round}: the winner holds a majority: {values:?}"
        );
        // The loser's attempt returned once a majority refused it; its
        // deletes on the nodes it won follow.
        eventually(
            &format!("round {round}: the loser released what it got"),
            Duration::from_secs(5),
            || {
                servers
                    .iter()
                    .all(|s| get(s, &resource).is_none_or(|v| v == winner.token()))
            },
        )
        .await;
        winner.release().await.unwrap();
    }
    // Losers left no key behind (the last deletes may still be on their way).
    all_empty(&servers, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn waiting_clients_never_overlap_in_the_critical_section() {
    let servers = start_nodes(3);
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let redlock = builder(&servers)
            .retry_delay(Duration::from_millis(10))
            .wait(Duration::from_secs(30))
            .build()
            .unwrap();
        let (inside, entries) = (Arc::clone(&inside), Arc::clone(&entries));
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = redlock
                    .lock("cron:archive", Duration::from_secs(10))
                    .await
                    .expect("lock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders inside at once");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                entries.fetch_add(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker");
    }
    assert_eq!(entries.load(Ordering::SeqCst), 30);
}

#[tokio::test]
async fn lock_gives_up_with_held_when_the_wait_runs_out() {
    let servers = start_nodes(3);
    let holder = client(&servers);
    let guard = holder
        .try_lock("busy", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let waiter = builder(&servers)
        .retry_delay(Duration::from_millis(20))
        .wait(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    match waiter.lock("busy", Duration::from_secs(10)).await {
        Err(Error::Held {
            refused, nodes: 3, ..
        }) if refused >= 2 => {}
        other => panic!("expected Held by a majority of 3 nodes, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(200), "it did wait");

    let counted = builder(&servers).max_attempts(3).build().unwrap();
    let before = calls(&servers[0], "set");
    assert!(matches!(
        counted.lock("busy", Duration::from_secs(10)).await,
        Err(Error::Held { .. })
    ));
    assert_eq!(
        calls(&servers[0], "set") - before,
        3,
        "exactly the attempt budget"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn lock_waits_for_the_holder_to_release() {
    let servers = start_nodes(3);
    let holder = client(&servers);
    let guard = holder
        .try_lock("handoff", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let waiter = builder(&servers)
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("handoff", Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the waiter cannot get a held lock");
    guard.release().await.unwrap();
    let second = waiting
        .await
        .unwrap()
        .expect("waiter gets the lock after the release");
    second.release().await.unwrap();
}

/// A holder whose lock expired must not release or extend the next owner's.
#[tokio::test]
async fn a_late_holder_cannot_release_or_extend_the_next_owners_lock() {
    let servers = start_nodes(3);
    // Without auto-renewal, so that the first lock runs out as it would for a
    // holder that was paused or cut off.
    let late = builder(&servers).auto_renew(false).build().unwrap();
    let next = client(&servers);
    let mut stale = late
        .try_lock("invoice:42", Duration::from_millis(600))
        .await
        .unwrap()
        .unwrap();
    // Wait for the keys to expire on every node.
    all_empty(&servers, Duration::from_secs(5)).await;
    let current = next
        .try_lock("invoice:42", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    // The next owner holds a majority (a node it reached last may be missing).
    let holding: Vec<&RedisServer> = servers
        .iter()
        .filter(|s| get(s, "invoice:42").as_deref() == Some(current.token()))
        .collect();
    assert!(holding.len() >= 2);

    match stale.extend(Duration::from_secs(60)).await {
        Err(Error::Lost { confirmed: 0, .. }) => {}
        other => panic!("extend by a stale holder must fail with Lost, got {other:?}"),
    }
    for server in &holding {
        assert!(
            pttl(server, "invoice:42") <= 5_000,
            "the next owner's ttl was not touched"
        );
    }
    let report = stale.release().await.expect("nodes answered");
    assert!(report.confirmed >= 2, "a majority answered: {report:?}");
    assert_eq!(
        report.deleted, 0,
        "nothing of the stale holder's was left to delete"
    );
    for server in &holding {
        assert_eq!(get(server, "invoice:42").as_deref(), Some(current.token()));
    }
    current.release().await.unwrap();
}

/// The same, with the stale holder's extend arriving while its own validity
/// has not passed yet: the owner check on each node refuses it.
#[tokio::test]
async fn extend_is_refused_on_nodes_where_another_token_sits() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let mut guard = redlock
        .try_lock("seat:7", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    // Another owner's token replaces ours on two nodes (e.g. after restarts
    // without persistence).
    for server in &servers[..2] {
        set_foreign(server, "seat:7", "someone-else", 10_000);
    }
    match guard.extend(Duration::from_secs(20)).await {
        Err(Error::Lost {
            confirmed,
            quorum: 2,
            nodes: 3,
        }) if confirmed <= 1 => {}
        other => panic!("expected Lost with at most 1 of 3 confirming, got {other:?}"),
    }
    for server in &servers[..2] {
        assert_eq!(get(server, "seat:7").as_deref(), Some("someone-else"));
        assert!(pttl(server, "seat:7") <= 10_000);
    }
    let report = guard.release().await.unwrap();
    assert!(report.deleted <= 1, "only our own key can be deleted: {report:?}");
    eventually(
        "our key on the third node is deleted",
        Duration::from_secs(5),
        || get(&servers[2], "seat:7").is_none(),
    )
    .await;
    for server in &servers[..2] {
        assert_eq!(get(server, "seat:7").as_deref(), Some("someone-else"));
    }
}

#[tokio::test]
async fn failed_attempt_leaves_no_key_on_any_node() {
    let servers = start_nodes(5);
    for server in &servers[..3] {
        set_foreign(server, "pdf:500", "other-owner", 30_000);
    }
    let redlock: Redlock = client(&servers);
    assert!(
        redlock
            .try_lock("pdf:500", Duration::from_secs(10))
            .await
            .unwrap()
            .is_none()
    );
    // The granted nodes are released: the attempt returns once a majority
    // answered (here at once: three refusals), the deletes follow.
    all_empty(&servers[3..], Duration::from_secs(5)).await;
    for server in &servers[..3] {
        assert_eq!(get(server, "pdf:500").as_deref(), Some("other-owner"));
    }
}
