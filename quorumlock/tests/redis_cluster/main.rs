//! Redis Cluster members against real clusters started by the test kit:
//! the lock's API over members that are each a cluster (basics), mutual
//! exclusion while a primary fails over or a slot migrates (chaos).

mod basics;
mod chaos;
mod redirects;

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::redis_cluster::RedisCluster;

/// The locks' ttl in these tests.
const TTL: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client whose members are `clusters`, one member each.
fn client(clusters: &[&RedisCluster]) -> Redlock {
    Redlock::builder()
        .nodes(clusters.iter().map(|c| c.url()))
        .wait(Duration::from_secs(10))
        .build()
        .expect("a client over cluster members")
}
