//! Mutual exclusion over three members that are each a Redis Cluster of
//! three primaries with a replica each, while the contended resource's
//! slot moves in one member: its primary killed (the replica promoted), and
//! the slot migrating to another primary while locks are held, renewed and
//! contended. Every scenario asserts 0 overlaps, fencing tokens that grow
//! with every hand-over, grants while the fault is in force, no loss of a
//! lock held throughout (a majority of its members stayed up), and no lock
//! key left behind.

use std::time::Duration;

use quorumlock::{LockOptions, Redlock};
use quorumlock_testkit::checker::{Api, Checker, RESOURCE, Renewal};
use quorumlock_testkit::faults::{Schedule, Target};
use quorumlock_testkit::redis_cluster_chaos::{ClusterAction, ClustersTarget};

use super::{TTL, ms};

/// How long each fault stays: twice the ttl, so that the lock changes
/// hands while it is in force, also on a loaded machine.
const FAULT_FOR: Duration = Duration::from_secs(4);

/// A lock in the contended resource's slot (its hash tag is the
/// resource's name), held by a client of its own through every fault.
fn held_resource() -> String {
    format!("{{{RESOURCE}}}:held")
}

/// Runs the checker's contenders while `actions` are applied one after the
/// other, each followed by [`FAULT_FOR`] of contention.
async fn run(scenario: &str, actions: &[ClusterAction]) {
    let checker = Checker::new(scenario)
        .ttl(TTL)
        .renewal(Renewal::Mixed)
        .api(Api::Mixed)
        .fenced(true);
    let mut schedule = Schedule::new().await_acquisition();
    for action in actions {
        schedule = schedule
            .wait(ms(300))
            .await_acquisition()
            .then(action.clone())
            .wait(FAULT_FOR);
    }
    let target = tokio::task::spawn_blocking(|| ClustersTarget::start(3, 3, 1))
        .await
        .expect("clusters");
    let holder = Redlock::builder()
        .nodes(target.urls())
        .options(LockOptions::new().fenced(true))
        .build()
        .expect("holder's client");
    let held = holder
        .try_lock(held_resource(), TTL)
        .await
        .expect("no error")
        .expect("the held lock");
    let (report, target) = checker.run(target, schedule.wait(ms(500))).await;
    report.assert_safe();
    let fences: Vec<u64> = report
        .history
        .iter()
        .map(|h| h.fence.expect("the checker's locks are fenced"))
        .collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "{scenario}: fencing tokens not increasing across hand-overs: {fences:?}"
    );
    report.assert_live();
    assert!(
        held.is_held(),
        "{scenario}: a lock whose members kept a majority was lost"
    );
    held.release().await.expect("released");
    let shutdown = holder.shutdown(Duration::from_secs(5)).await;
    assert!(shutdown.is_complete(), "{scenario}: {shutdown:?}");
    for (m, cluster) in target.clusters.iter().enumerate() {
        for key in [RESOURCE.to_owned(), held_resource()] {
            let value = cluster.cli(&["GET", &key]).expect("GET");
            assert_eq!(value.trim(), "", "{scenario}: member {m} kept {key}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_and_its_replica_promoted_keeps_mutual_exclusion() {
    run(
        "Redis Cluster members: a primary killed",
        // The second member's primary dies while the first's is still
        // down: the lock stays available, and the held one renewed, only
        // if the first member follows its promoted replica.
        &[
            ClusterAction::KillPrimary(0),
            ClusterAction::KillPrimary(2),
            ClusterAction::StartKilled,
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrating_under_held_and_contended_locks_keeps_mutual_exclusion() {
    run(
        "Redis Cluster members: a slot migrating",
        &[
            ClusterAction::BeginMigration(1),
            ClusterAction::FinishMigrations,
            ClusterAction::BeginMigration(1),
            ClusterAction::FinishMigrations,
        ],
    )
    .await;
}
