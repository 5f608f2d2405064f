//! Mutual exclusion on a 3-server ZooKeeper ensemble while servers fail: the
//! chaos checker's contenders (each its own client, its own session) against
//! a follower killed, the leader killed, the leader paused (partitioned away:
//! the others elect a new one), and a server cut off from the clients. Every
//! scenario asserts 0 overlaps, every holder stopped by its validity,
//! fencing tokens that grow with every hand-over, and that the lock kept
//! being granted while the fault was in force.

use std::time::Duration;

use quorumlock_testkit::checker::{Api, Checker, Renewal};
use quorumlock_testkit::consensus_chaos::{ConsensusAction as ZkAction, ConsensusTarget};
use quorumlock_testkit::faults::Schedule;
use quorumlock_testkit::zookeeper::ZkEnsemble;

use super::{TTL, ms};

/// Servers of the ensemble: the smallest that survives a failure.
const SERVERS: usize = 3;

/// How long each fault stays: twice the ttl. The ensemble elects a new
/// leader within half a second (the kit's 100 ms tick), a client moves off
/// a dead or silent server within its connect timeout (1 s), and a lock
/// whose release was sent into the election is deleted when the ensemble
/// serves again. Twice the ttl leaves the lock time to change hands while
/// the fault is in force, also with two copies of the suite on two cores.
const FAULT_FOR: Duration = Duration::from_secs(4);

async fn run(scenario: &str, faults: &[(ZkAction, ZkAction)]) {
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
    let target = ConsensusTarget::new(ZkEnsemble::start(SERVERS));
    let (report, target) = checker.run(target, schedule.wait(ms(500))).await;
    report.assert_safe();
    // The history is in the order of `enter`; without overlaps, that is
    // the order of the hand-overs.
    let fences: Vec<u64> = report
        .history
        .iter()
        .map(|h| h.fence.expect("ZooKeeper locks are fenced"))
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
    run("ZooKeeper: no faults", &[]).await;
}

#[tokio::test]
async fn a_follower_killed_and_restarted_keeps_mutual_exclusion() {
    run(
        "ZooKeeper: follower killed",
        &[(ZkAction::KillFollower, ZkAction::StartKilled)],
    )
    .await;
}

#[tokio::test]
async fn the_leader_killed_and_restarted_keeps_mutual_exclusion() {
    run(
        "ZooKeeper: leader killed",
        &[(ZkAction::KillLeader, ZkAction::StartKilled)],
    )
    .await;
}

#[tokio::test]
async fn the_leader_partitioned_away_keeps_mutual_exclusion() {
    run(
        "ZooKeeper: leader paused",
        &[(ZkAction::PauseLeader, ZkAction::ResumeAll)],
    )
    .await;
}

#[tokio::test]
async fn a_server_cut_off_from_the_clients_keeps_mutual_exclusion() {
    run(
        "ZooKeeper: server cut off",
        &[
            (ZkAction::CutOff(0), ZkAction::Reconnect),
            (ZkAction::CutOff(2), ZkAction::Reconnect),
        ],
    )
    .await;
}
