//! What a member does when a slot moves under it: a request refused with
//! `ASK` (its key's slot migrating) or `MOVED` (the slot moved) is not sent
//! again elsewhere, so a release can never run before the acquire it undoes;
//! a `MOVED` refusal corrects the member's map for the next request.

use std::time::{Duration, Instant};

use quorumlock::Redlock;
use quorumlock_testkit::redis_cluster::RedisCluster;
use quorumlock_testkit::server::RedisServer;

use super::TTL;

/// How long the member may take to run a write the lock did not wait for:
/// an acquisition returns once a majority confirmed.
const LAGGING_WRITE: Duration = Duration::from_secs(2);

/// Whether `read(key)` gives `token` within [`LAGGING_WRITE`].
fn reaches(read: &impl Fn(&str) -> String, key: &str, token: &str) -> bool {
    let started = Instant::now();
    while started.elapsed() < LAGGING_WRITE {
        if read(key) == token {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_are_not_followed_and_the_next_goes_where_the_slot_moved() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0))
        .await
        .expect("cluster");
    let singles = [RedisServer::start(), RedisServer::start()];
    let redlock = Redlock::builder()
        .nodes([cluster.url(), singles[0].url(), singles[1].url()])
        .build()
        .expect("client");
    let key = "redirects:moving";
    let on_cluster = |key: &str| cluster.cli(&["GET", key]).expect("GET").trim().to_owned();
    // The member knows the map before the slot moves.
    let first = redlock
        .try_lock(key, TTL)
        .await
        .expect("no error")
        .expect("acquired");
    assert!(
        reaches(&on_cluster, key, first.token()),
        "the member never took the lock"
    );
    first.release().await.expect("released");

    let slot = cluster.slot_of(key);
    let from = cluster.primary_for_slot(slot);
    let to = *cluster
        .current_primaries()
        .iter()
        .find(|&&p| p != from)
        .expect("another primary");
    let migration = tokio::task::block_in_place(|| cluster.begin_migration(slot, to)).expect("a migration");
    // The key is on neither primary: the old one answers ASK, and the
    // member does not follow it. The lock stands on the two other members.
    let during = redlock
        .try_lock(key, TTL)
        .await
        .expect("no error")
        .expect("acquired");
    assert_eq!(on_cluster(key), "", "the member followed an ASK redirect");
    during.release().await.expect("released");
    tokio::task::block_in_place(|| cluster.finish_migration(migration));
    assert_eq!(on_cluster(key), "", "a key left behind on the member");

    // The member's map still names the old primary: its first request is
    // refused (MOVED) and corrects the map, the next one lands.
    let mut held_on_cluster = false;
    for _ in 0..2 {
        let guard = redlock
            .try_lock(key, TTL)
            .await
            .expect("no error")
            .expect("acquired");
        held_on_cluster |= reaches(&on_cluster, key, guard.token());
        guard.release().await.expect("released");
    }
    assert!(
        held_on_cluster,
        "the member never followed the slot to its new primary"
    );
    assert_eq!(on_cluster(key), "");
}
