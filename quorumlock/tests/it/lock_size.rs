//! A lock's size is bounded: one lock takes at most `MAX_RESOURCES`
//! resources, and a lock of that many sets and releases every key.

use std::time::Duration;

use quorumlock::{Error, MAX_RESOURCES};
use quorumlock_testkit::{client, dbsize, start_nodes};

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
