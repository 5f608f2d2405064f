//! Taking, extending and releasing a lock on healthy nodes.

use std::time::Duration;

use quorumlock::{DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED};
use quorumlock_testkit::{all_empty, client, eventually, get, pttl, set_foreign, start_nodes};
use tokio::time::Instant;

async fn lock_and_unlock_on(n: usize) {
    let servers = start_nodes(n);
    let redlock = client(&servers);
    assert_eq!(redlock.quorum(), n / 2 + 1);
    let ttl = Duration::from_secs(10);
    let before = Instant::now();
    let guard = redlock
        .try_lock("doc:1001", ttl)
        .await
        .expect("healthy nodes")
        .expect("a free resource is granted");
    let after = Instant::now();

    assert_eq!(guard.resources(), ["doc:1001"]);
    assert_eq!(guard.token().len(), 32, "128-bit hex token");
    let drift = ttl.mul_f64(DEFAULT_DRIFT_FACTOR) + DEFAULT_DRIFT_FIXED;
    assert!(guard.valid_until() >= before + ttl - drift);
    assert!(guard.valid_until() <= after + ttl - drift);
    // The call returns once a majority granted; the other nodes' SETs may
    // still be on their way, so only a majority is certain at this point.
    let mut holders = 0;
    for server in &servers {
        if let Some(value) = get(server, "doc:1001") {
            assert_eq!(value, guard.token());
            let left = pttl(server, "doc:1001");
            assert!(left > 9_000 && left <= 10_000, "PX ttl on the node: {left}");
            holders += 1;
        }
    }
    assert!(holders >= redlock.quorum());

    // Each release travels behind that node's SET on the same connection, so
    // every node that answers reports our key deleted (the lock was set on
    // all of them). The call returns once a majority confirmed; the other
    // nodes' deletes complete in the background and leave every node empty.
    let report = guard.release().await.expect("release");
    assert_eq!(report.nodes, n);
    assert!(report.confirmed >= redlock.quorum(), "{report:?}");
    assert_eq!(
        report.deleted, report.confirmed,
        "every answering node held our key"
    );
    all_empty(&servers, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn lock_and_unlock_on_one_node() {
    lock_and_unlock_on(1).await;
}

#[tokio::test]
async fn lock_and_unlock_on_three_nodes() {
    lock_and_unlock_on(3).await;
}

#[tokio::test]
async fn lock_and_unlock_on_five_nodes() {
    lock_and_unlock_on(5).await;
}

#[tokio::test]
async fn released_resource_can_be_locked_again() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let ttl = Duration::from_secs(10);
    let first = redlock.try_lock("job", ttl).await.unwrap().unwrap();
    assert!(redlock.try_lock("job", ttl).await.unwrap().is_none());
    let first_token = first.token().to_owned();
    first.release().await.unwrap();
    let second = redlock.try_lock("job", ttl).await.unwrap().unwrap();
    assert_ne!(second.token(), first_token, "every acquisition has its own token");
    second.release().await.unwrap();
}

#[tokio::test]
async fn extend_keeps_the_key_alive_past_the_original_ttl() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let ttl = Duration::from_millis(700);
    let mut guard = redlock.try_lock("report", ttl).await.unwrap().unwrap();
    let original_expiry = Instant::now() + ttl;
    let old_valid_until = guard.valid_until();

    guard.extend(Duration::from_secs(10)).await.expect("extend");
    assert!(guard.valid_until() > old_valid_until + Duration::from_secs(5));

    // Let the original ttl pass: every node must still hold our token.
    tokio::time::sleep_until(original_expiry + Duration::from_millis(300)).await;
    let alive = servers
        .iter()
        .filter(|s| get(s, "report").as_deref() == Some(guard.token()) && pttl(s, "report") > 8_000)
        .count();
    assert!(
        alive >= redlock.quorum(),
        "a majority still holds our token: {alive}"
    );
    assert!(guard.remaining() > Duration::from_secs(8));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn multi_resource_lock_is_all_or_nothing_on_each_node() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let ttl = Duration::from_secs(10);

    // Another owner holds "b" on node 0: nodes 1 and 2 still grant [a, b],
    // and node 0 must not keep a half lock on "a".
    set_foreign(&servers[0], "b", "other-owner", 10_000);
    let guard = redlock
        .try_lock(["a", "b"], ttl)
        .await
        .unwrap()
        .expect("2 of 3 grant");
    assert_eq!(guard.resources(), ["a", "b"]);
    assert_eq!(get(&servers[0], "a"), None, "node 0 refused, so it set no key");
    for server in &servers[1..] {
        assert_eq!(get(server, "a").as_deref(), Some(guard.token()));
        assert_eq!(get(server, "b").as_deref(), Some(guard.token()));
    }

    // Overlapping multi-resource locks exclude each other; disjoint ones don't.
    assert!(redlock.try_lock(["b", "c"], ttl).await.unwrap().is_none());
    assert!(redlock.try_lock(["c", "a"], ttl).await.unwrap().is_none());
    let disjoint = redlock
        .try_lock(["c", "d"], ttl)
        .await
        .unwrap()
        .expect("disjoint");
    disjoint.release().await.unwrap();
    guard.release().await.unwrap();
    all_empty(&servers[1..], Duration::from_secs(5)).await;
    assert_eq!(get(&servers[0], "b").as_deref(), Some("other-owner"));

    // With "b" taken on a majority, [a, b] fails and leaves no "a" anywhere.
    set_foreign(&servers[1], "b", "other-owner", 10_000);
    assert!(redlock.try_lock(["a", "b"], ttl).await.unwrap().is_none());
    // The failed attempt returns once a majority refused; its delete of "a"
    // on the node that granted follows.
    eventually("no \"a\" is left anywhere", Duration::from_secs(5), || {
        servers.iter().all(|s| get(s, "a").is_none())
    })
    .await;
}

#[tokio::test]
async fn dropping_a_guard_releases_it_in_the_background() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let guard = redlock
        .try_lock("dropped", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    drop(guard);
    // The release runs on the runtime; wait for it without assuming when.
    all_empty(&servers, Duration::from_secs(5)).await;
    assert!(
        redlock
            .try_lock("dropped", Duration::from_secs(30))
            .await
            .unwrap()
            .is_some()
    );
}
