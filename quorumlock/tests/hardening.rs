//! Edges of the input and of the nodes, against real redis-server nodes:
//! busy is told apart from an outage when a node is down, the library's own
//! keys cannot collide with locks and do not live forever, a lock's size is
//! bounded, and a release racing a renewal leaves no key behind.

use std::time::Duration;

use quorumlock::{Error, MAX_RESOURCES, RESERVED_PREFIX, Redlock};
use quorumlock_testkit::{builder, client, dbsize, eventually, get, pttl, set_foreign, start_nodes};

/// Routine maintenance: one node of three is down while another owner holds
/// the lock. That is contention (wait, or answer 423), not an outage (page
/// the on-call): `try_lock` says busy, and the error still names the node
/// that failed, for monitoring.
#[tokio::test]
async fn a_held_lock_with_one_node_down_is_busy_not_unreachable() {
    let mut nodes = start_nodes(3);
    for node in &nodes {
        set_foreign(node, "maintenance", "another-owner", 30_000);
    }
    let down = nodes[2].port();
    nodes[2].kill();
    let redlock = client(&nodes);
    assert!(
        redlock
            .try_lock("maintenance", Duration::from_secs(10))
            .await
            .expect("busy is not an error")
            .is_none()
    );
    let once = redlock
        .with_options(redlock.options().max_attempts(1))
        .expect("options");
    match once.lock("maintenance", Duration::from_secs(10)).await {
        Err(Error::Held { errors, nodes: 3, .. }) => {
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].node.contains(&down.to_string()), "{errors:?}");
        }
        other => panic!("expected busy, got {other:?}"),
    }
}

/// With two of three nodes down nothing can be decided: that is an outage.
#[tokio::test]
async fn a_lock_with_a_majority_of_nodes_down_is_unreachable() {
    let mut nodes = start_nodes(3);
    set_foreign(&nodes[0], "outage", "another-owner", 30_000);
    nodes[1].kill();
    nodes[2].kill();
    let redlock = client(&nodes);
    let outcome = redlock.try_lock("outage", Duration::from_secs(10)).await;
    assert!(matches!(outcome, Err(Error::Unreachable { .. })), "{outcome:?}");
}

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
    let retention = i64::try_from(quorumlock::FENCE_RETENTION.as_millis()).expect("fits");
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

#[tokio::test]
async fn a_lock_takes_at_most_max_resources() {
    let nodes = start_nodes(1);
    let redlock = client(&nodes);
    let names = |n: usize| (0..n).map(|i| format!("many:{i}")).collect::<Vec<_>>();
    let too_many = redlock
        .try_lock(names(MAX_RESOURCES + 1), Duration::from_secs(5))
        .await;
    assert!(matches!(too_many, Err(Error::Config(_))), "{too_many:?}");
    let guard = redlock
        .try_lock(names(MAX_RESOURCES), Duration::from_secs(5))
        .await
        .expect("nodes up")
        .expect("free");
    assert_eq!(dbsize(&nodes[0]), i64::try_from(MAX_RESOURCES).expect("fits"));
    guard.release().await.expect("release");
    assert_eq!(dbsize(&nodes[0]), 0);
}

/// Renewal heals (re-sets our key where it is missing). A release that
/// comes while a renewal round of its lock is being handed to the nodes must
/// not be followed by that round's heal: it would leave a key nobody owns,
/// for a whole ttl. Many locks are released at random times while a few
/// thousand others make each renewal round long, and each released key is
/// checked a moment after its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_racing_renewals_leave_no_key() {
    const BACKGROUND: usize = 2000;
    const TASKS: usize = 32;
    let nodes = std::sync::Arc::new(start_nodes(3));
    let redlock: Redlock = builder(&nodes)
        .node_timeout(Duration::from_millis(150))
        .heal(true)
        .build()
        .expect("config");
    let ttl = Duration::from_millis(600);
    let background =
        futures::future::join_all((0..BACKGROUND).map(|i| redlock.lock(format!("background:{i}"), ttl)))
            .await;
    let run_until = tokio::time::Instant::now() + Duration::from_secs(2);
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (redlock, nodes) = (redlock.clone(), std::sync::Arc::clone(&nodes));
            tokio::spawn(async move {
                let mut healed = Vec::new();
                let mut round = 0;
                while tokio::time::Instant::now() < run_until {
                    round += 1;
                    let key = format!("race:{task}:{round}");
                    let guard = redlock.lock(key.as_str(), ttl).await.expect("lock");
                    let hold = Duration::from_millis(rand::random_range(0..400));
                    tokio::time::sleep(hold).await;
                    let token = guard.token().to_owned();
                    guard.release().await.expect("release");
                    // Well past any request handed over before or with the release.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    for node in nodes.iter() {
                        if get(node, &key).as_deref() == Some(token.as_str()) {
                            healed.push(format!("{key} on port {}", node.port()));
                        }
                    }
                }
                (round, healed)
            })
        })
        .collect();
    let mut releases = 0;
    let mut healed = Vec::new();
    for task in tasks {
        let (rounds, found) = task.await.expect("no panic");
        releases += rounds;
        healed.extend(found);
    }
    assert!(
        healed.is_empty(),
        "{} of {releases} released keys were set again: {healed:?}",
        healed.len()
    );
    for guard in background {
        guard.expect("lock").release().await.expect("release");
    }
}
