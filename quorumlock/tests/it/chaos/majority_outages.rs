//! Majority faults shorter than the ttl: two nodes of three pause or drop
//! off the network right after an acquisition, for a little less than the
//! ttl. Every test asserts 0 overlaps and that the holders caught by the
//! fault are told of their loss.

use std::time::Duration;

use quorumlock_testkit::Persistence;
use quorumlock_testkit::checker::{Api, Checker, ci_or_soak};
use quorumlock_testkit::faults::{Action, Cluster, Schedule};

use super::{NODES, default_drift, majority, ms};

/// Majority pauses in CI (each one ttl long, plus the wait for a holder).
const CI_MAJORITY_PAUSES: usize = 1;

/// Majority pauses in the soak: a loss signal per pause, each from a holder
/// caught at a different point of its hold.
const SOAK_MAJORITY_PAUSES: usize = 10;

/// Majority partitions in CI: one black hole and one refusal.
const CI_MAJORITY_PARTITIONS: usize = 2;

/// Majority partitions in the soak: ten of each kind, as the pauses.
const SOAK_MAJORITY_PARTITIONS: usize = 20;

/// A majority unreachable for a little less than the ttl, starting right
/// after an acquisition, with holds longer than that.
///
/// Why this length: a holder that renewed just before the fault has
/// `ttl - drift` of validity left, so a shorter fault may be ridden out
/// without a loss. A fault between `ttl - drift` and `ttl` certainly ends
/// the holder's validity while staying shorter than the ttl: its keys may
/// still be on the nodes when they come back (and answer late renewals with
/// our token). The holder must be told at the end of its validity all the
/// same, and nobody may enter before that.
fn majority_outage(
    checker: &mut Checker,
    ttl: Duration,
    cycles: usize,
    fault: fn(usize, Vec<usize>) -> (Action, Action),
) -> Schedule {
    let outage = ttl - default_drift(ttl) / 2;
    let mut schedule = Schedule::new();
    for cycle in 0..cycles {
        let (start, end) = fault(cycle, majority(checker));
        schedule = schedule
            .await_acquisition()
            .then(start)
            .wait(outage)
            .then(end)
            .wait(ms(300));
    }
    schedule
}

#[tokio::test]
async fn majority_pause_shorter_than_the_ttl_signals_the_loss_without_overlap() {
    let ttl = Duration::from_secs(2);
    let mut checker = Checker::new("majority pause for ttl - drift/2")
        .api(Api::Mixed)
        .ttl(ttl)
        .hold(ttl + ms(500), ttl + ms(1000))
        .tail(ms(1500));
    let cycles = ci_or_soak(CI_MAJORITY_PAUSES, SOAK_MAJORITY_PAUSES);
    let schedule = majority_outage(&mut checker, ttl, cycles, |_, nodes| {
        (Action::Pause(nodes.clone()), Action::Resume(nodes))
    });
    let (report, _cluster) = checker
        .run(Cluster::start(NODES, Persistence::None), schedule)
        .await;
    report.assert_safe();
    assert!(
        report.losses >= cycles,
        "every holder caught by the pause must be told: {} losses in {cycles} pauses",
        report.losses
    );
    assert!(
        report.acquisitions > cycles,
        "the lock is granted again after the pause"
    );
}

#[tokio::test]
async fn majority_partition_shorter_than_the_ttl_signals_the_loss_without_overlap() {
    let ttl = Duration::from_secs(2);
    let mut checker = Checker::new("majority partition for ttl - drift/2 (black hole, refuse)")
        .api(Api::Mixed)
        .ttl(ttl)
        .hold(ttl + ms(500), ttl + ms(1000))
        .tail(ms(1500));
    let cycles = ci_or_soak(CI_MAJORITY_PARTITIONS, SOAK_MAJORITY_PARTITIONS);
    let schedule = majority_outage(&mut checker, ttl, cycles, |cycle, nodes| {
        let start = if cycle % 2 == 0 {
            Action::BlackHole(nodes.clone())
        } else {
            Action::Refuse(nodes.clone())
        };
        (start, Action::Heal(nodes))
    });
    let cluster = Cluster::start(NODES, Persistence::None).with_proxies();
    let (report, _cluster) = checker.run(cluster, schedule).await;
    report.assert_safe();
    assert!(
        report.losses >= cycles,
        "every holder caught by the partition must be told: {} losses in {cycles} partitions",
        report.losses
    );
    assert!(
        report.acquisitions > cycles,
        "the lock is granted again after the partition"
    );
}
