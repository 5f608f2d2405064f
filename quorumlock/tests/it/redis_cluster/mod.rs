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

/// How long each member has to answer a request in these tests: the
/// library's 100 ms is for an idle network, and this binary's chaos tests run
/// 36 servers and their contenders beside the others on two cores. These
/// tests are about where requests go, not how fast.
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// A client whose members are `clusters`, one member each.
fn client(clusters: &[&RedisCluster]) -> Redlock {
    Redlock::builder()
        .nodes(clusters.iter().map(|c| c.url()))
        .node_timeout(NODE_TIMEOUT)
        .wait(Duration::from_secs(10))
        .build()
        .expect("a client over cluster members")
}
