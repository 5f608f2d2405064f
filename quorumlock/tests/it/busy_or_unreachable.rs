//! Busy or unreachable, when nodes are down: a lock held by another owner
//! with one node of three down is contention (wait, or answer 423), not an
//! outage; with a majority down nothing can be decided, which is one.

use std::time::Duration;

use quorumlock::Error;
use quorumlock_testkit::{client, set_foreign, start_nodes};

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
