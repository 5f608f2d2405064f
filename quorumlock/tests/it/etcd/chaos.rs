//! Mutual exclusion on a 3-member etcd cluster while members fail: the
//! chaos checker's contenders (each its own client) against a follower
//! killed, the leader killed, the leader paused (partitioned away: the
//! others elect a new one), and a member cut off from the clients. Every
//! scenario asserts 0 overlaps, every holder stopped by its validity,
//! fencing tokens that grow with every hand-over, and that the lock kept
//! being granted while the fault was in force.

use std::time::Duration;

use quorumlock_testkit::checker::{Api, Checker, Renewal};
use quorumlock_testkit::consensus_chaos::{ConsensusAction as EtcdAction, ConsensusTarget};
use quorumlock_testkit::etcd::EtcdCluster;
use quorumlock_testkit::faults::Schedule;

use super::{TTL, ms};

/// Members of the cluster: the smallest that survives a failure.
const MEMBERS: usize = 3;

/// How long each fault stays: twice the ttl. The cluster elects a new
/// leader within one election timeout (500 ms in the kit), but a lock whose
/// release was sent into the election stays until the cluster serves again
/// (its revoke is retried) and at worst until its lease ends, a ttl after
/// its last keep-alive; and the client must first drop a paused member
/// (a missed ping). Twice the ttl leaves the lock time to change hands
/// while the fault is in force, also with two copies of the suite running
/// on two cores (`scripts/stress-tests.sh`).
const FAULT_FOR: Duration = Duration::from_secs(4);

async fn run(scenario: &str, faults: &[(EtcdAction, EtcdAction)]) {
    let checker = Checker::new(scenario)
        .ttl(TTL)
        .renewal(Renewal::Mixed)
        .api(Api::Mixed);
    let mut schedule = Schedule::new().await_acquisition();
    for (fault, heal) in faults {
        schedule = schedule
            .wait(ms(300))
            .await_acquisition()
            .then(fault.clone())
            .wait(FAULT_FOR)
            .then(heal.clone());
    }
    let target = ConsensusTarget::new(EtcdCluster::start(MEMBERS));
    let (report, target) = checker.run(target, schedule.wait(ms(500))).await;
    report.assert_safe();
    // The history is in the order of `enter`; without overlaps, that is
    // the order of the hand-overs.
    let fences: Vec<u64> = report
        .history
        .iter()
        .map(|h| h.fence.expect("etcd locks are fenced"))
        .collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "{scenario}: fencing tokens not increasing across hand-overs: {fences:?}"
    );
    if faults.is_empty() {
        assert!(report.acquisitions > 0, "{scenario}: never acquired");
    } else {
        report.assert_live();
    }
    drop(target);
}

#[tokio::test]
async fn contention_without_faults_keeps_mutual_exclusion() {
    run("etcd: no faults", &[]).await;
}

#[tokio::test]
async fn a_follower_killed_and_restarted_keeps_mutual_exclusion() {
    run(
        "etcd: follower killed",
        &[(EtcdAction::KillFollower, EtcdAction::StartKilled)],
    )
    .await;
}

#[tokio::test]
async fn the_leader_killed_and_restarted_keeps_mutual_exclusion() {
    run(
        "etcd: leader killed",
        &[(EtcdAction::KillLeader, EtcdAction::StartKilled)],
    )
    .await;
}

#[tokio::test]
async fn the_leader_partitioned_away_keeps_mutual_exclusion() {
    run(
        "etcd: leader paused",
        &[(EtcdAction::PauseLeader, EtcdAction::ResumeAll)],
    )
    .await;
}

#[tokio::test]
async fn a_member_cut_off_from_the_clients_keeps_mutual_exclusion() {
    run(
        "etcd: member cut off",
        &[
            (EtcdAction::CutOff(0), EtcdAction::Reconnect),
            (EtcdAction::CutOff(2), EtcdAction::Reconnect),
        ],
    )
    .await;
}
