//! The library's own keys (its reserved prefix, the fence keys): they never
//! collide with a lock, names inside the prefix are refused as resources,
//! and a fence key expires after its retention instead of living forever.

use std::time::Duration;

use quorumlock::{Error, RESERVED_PREFIX};
use quorumlock_testkit::{client, dbsize, eventually, get, pttl, start_nodes};

/// `a:fence` is a legal resource name of its own: a fenced lock on `a` must
/// neither overwrite it nor strip its ttl. And names in the library's own
/// namespace are refused.
#[tokio::test]
async fn the_librarys_keys_never_collide_with_a_lock() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes);
    let plain = redlock
        .try_lock("a:fence", Duration::from_secs(30))
        .await
        .expect("nodes up")
        .expect("free");
    // The lock returns at a majority: let the last node's SET land too.
    eventually("every node holds a:fence", Duration::from_secs(2), || {
        nodes
            .iter()
            .all(|n| get(n, "a:fence").as_deref() == Some(plain.token()))
    })
    .await;
    let fenced = redlock
        .with_options(redlock.options().fenced(true))
        .expect("options");
    let guard = fenced
        .try_lock("a", Duration::from_secs(30))
        .await
        .expect("nodes up")
        .expect("free");
    assert!(guard.fence_token().is_some());
    for node in &nodes {
        assert_eq!(
            get(node, "a:fence").as_deref(),
            Some(plain.token()),
            "port {}",
            node.port()
        );
        assert!(
            pttl(node, "a:fence") > 0,
            "port {}: the plain lock kept its ttl",
            node.port()
        );
    }
    for reserved in [
        format!("{RESERVED_PREFIX}fence:{{a}}"),
        format!("{RESERVED_PREFIX}x"),
    ] {
        let outcome = redlock.try_lock(reserved.as_str(), Duration::from_secs(5)).await;
        assert!(
            matches!(outcome, Err(Error::Config(_))),
            "{reserved}: {outcome:?}"
        );
    }
    guard.release().await.expect("release");
    plain.release().await.expect("release");
}

/// A fence key lives a day after its last token, not forever: one key per
/// fenced resource ever locked would fill a node under `noeviction`.
#[tokio::test]
async fn fence_keys_expire_after_their_retention() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes);
    let fenced = redlock
        .with_options(redlock.options().fenced(true))
        .expect("options");
    let guard = fenced
        .lock("retained", Duration::from_secs(10))
        .await
        .expect("lock");
    guard.release().await.expect("release");
    // The retention docs/how-it-works.md and docs/operations.md promise: a day.
    let retention: i64 = 24 * 60 * 60 * 1000;
    eventually("every node has the fence", Duration::from_secs(2), || {
        nodes.iter().all(|n| dbsize(n) == 1)
    })
    .await;
    for node in &nodes {
        let ttl = pttl(node, "quorumlock:fence:{retained}");
        assert!(
            ttl > retention - 60_000 && ttl <= retention,
            "port {}: fence pttl {ttl} ms",
            node.port()
        );
    }
}
