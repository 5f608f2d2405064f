//! Clock skew: one node's clock far outside the drift allowance (which the
//! clients measure), and every clock within it: 0 overlaps; and every clock
//! jumping with no allowance at all, which the checker must see overlap.

use std::time::Duration;

use quorumlock_testkit::checker::{Api, Checker, Holding, RESOURCE, Renewal, Report, ci_or_soak};
use quorumlock_testkit::faults::{Action, Cluster, Schedule};
use quorumlock_testkit::{Persistence, SkewedClock};
use rand::RngExt;

use super::{NODES, default_drift, ms};

/// The ttl in the fast-clock scenario: the 1.5x node forgets a key after
/// 200 ms, and holds of up to a ttl run past that several times a second.
const FAST_CLOCK_TTL: Duration = Duration::from_millis(300);

/// The node timeout in the fast-clock scenario: a 1.5x node keeps a key for
/// two thirds of [`FAST_CLOCK_TTL`], far more than this timeout plus the
/// drift allowance, so its grants count (a node too fast for that would
/// count as failed, which is not what this scenario tests).
const FAST_CLOCK_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// How long the fast-clock scenario's contenders use their clients before
/// they contend: about ten readings of each node's clock (a client taking
/// locks reads them every 200 ms), where two bound a rate.
const FAST_CLOCK_WARM_UP: Duration = Duration::from_secs(2);

/// Occupations of a normal node by another owner in the fast-clock scenario
/// in CI (each 200-600 ms, with 50-300 ms between them): a few seconds in
/// which every grant is a bare majority with the fast node.
const CI_FAST_CLOCK_OCCUPATIONS: usize = 6;

/// Occupations in the soak: an occupation waits for the contenders to free
/// the node, so each cycle takes about 1.4 s, in which the lock is granted
/// about ten times (some 3.5 minutes and 1,500 grants in all), three in
/// four of the locks without renewal by a bare majority with the fast node.
const SOAK_FAST_CLOCK_OCCUPATIONS: usize = 150;

/// Acquisitions the soak's fast-clock scenario must make while the node is
/// fast: enough bare majorities with it for a rare interleaving to show.
const SOAK_FAST_CLOCK_ACQUISITIONS: usize = 1000;

/// Forward clock jumps in the all-clocks-fast scenarios in CI, one per hold.
const CI_CLOCK_JUMPS: usize = 2;

/// The forward jump of the unsafe control: the window in which the next
/// holder can enter before the last one's validity ends. Wider than an
/// attempt takes on a loaded CI machine (a 20 ms window was missed by both
/// jumps of a run there), so that the control's overlap does not depend on
/// the machine's load.
const CONTROL_JUMP_MS: i64 = 100;

/// Forward clock jumps in the all-clocks-fast scenarios in the soak: each is
/// a hand-over 10-15 ms after the keys expired, which the unsafe control
/// must see as an overlap and the safe one must not (about 70 s).
const SOAK_CLOCK_JUMPS: usize = 30;

/// One node's clock runs 1.5x fast, far outside the drift allowance: it
/// forgets a key after two thirds of the ttl. Another owner takes the key
/// on one of the two normal nodes for a while, then gives it back, over and
/// over: while it holds it, every lock is a bare majority with the fast
/// node, and once it gives it back a contender can win the freed node and
/// the fast one as soon as the fast one forgot the holder's key. Holders
/// that do not renew hold up to a ttl, past that moment. The contenders'
/// clients are in use and have read the fast node's clock, so their locks
/// end before the fast node forgets them.
#[tokio::test]
async fn one_node_clock_1_5x_fast_keeps_mutual_exclusion() {
    let mut checker = Checker::new("one node's clock 1.5x fast, bare majorities with it")
        .ttl(FAST_CLOCK_TTL)
        .node_timeout(FAST_CLOCK_NODE_TIMEOUT)
        .renewal(Renewal::Mixed)
        .api(Api::Mixed)
        .hold(ms(3), FAST_CLOCK_TTL)
        .warm_up(FAST_CLOCK_WARM_UP);
    let fast = checker.rng().random_range(0..NODES);
    let mut schedule = Schedule::new().wait(FAST_CLOCK_WARM_UP);
    for _ in 0..ci_or_soak(CI_FAST_CLOCK_OCCUPATIONS, SOAK_FAST_CLOCK_OCCUPATIONS) {
        let normal = (fast + checker.rng().random_range(1..NODES)) % NODES;
        let (held, between) = (checker.millis(200, 600), checker.millis(50, 300));
        schedule = schedule
            .then(Action::Occupy(vec![normal], RESOURCE.to_string()))
            .wait(held)
            .then(Action::Vacate(vec![normal]))
            .wait(between);
    }
    let cluster = Cluster::start_skewed(NODES, Persistence::None, SkewedClock::new(1.5, 0), &[fast]);
    let (report, _cluster) = checker.run(cluster, schedule).await;
    // Holders that do not renew (odd contenders) keep the validity of their
    // acquisition: two thirds of the ttl, less the allowance, when a bare
    // majority with the fast node granted it.
    let fixed: Vec<&Holding> = report.history.iter().filter(|h| h.contender % 2 == 1).collect();
    let cut = fixed
        .iter()
        .filter(|h| h.valid_until.saturating_duration_since(h.enter) < FAST_CLOCK_TTL.mul_f64(0.8))
        .count();
    println!(
        "[chaos] {cut} of {} locks without renewal were bare majorities with the fast node (validity cut to 2/3 of the ttl)",
        fixed.len()
    );
    report.assert_safe();
    report.assert_live();
    assert!(cut > 0, "no lock was a bare majority with the fast node");
    assert!(
        report.acquisitions_degraded >= ci_or_soak(1, SOAK_FAST_CLOCK_ACQUISITIONS),
        "{} acquisitions while the node was fast",
        report.acquisitions_degraded
    );
}

/// Every node's clock runs 0.5 % fast and jumps 5 ms forward once per
/// hold: a key expires up to 2000 * 0.005 + 5 = 15 ms early. Holders do not
/// renew and hold past their validity, and the others retry every few
/// milliseconds, so the next holder enters as soon as the keys are gone.
async fn all_clocks_slightly_fast(
    scenario: &str,
    drift: Option<(f64, Duration)>,
    rate: f64,
    jump_ms: i64,
) -> Report {
    let ttl = Duration::from_secs(2);
    let mut checker = Checker::new(scenario)
        .ttl(ttl)
        .renewal(Renewal::Off)
        .hold(ttl, ttl + ms(200))
        .retry(ms(1), ms(4))
        .tail(ms(1000));
    if let Some((factor, fixed)) = drift {
        checker = checker.drift(factor, fixed);
    }
    let mut schedule = Schedule::new().then(Action::ClockRate(rate));
    // One jump per ttl at most: two within one hold would add up to more.
    for _ in 0..ci_or_soak(CI_CLOCK_JUMPS, SOAK_CLOCK_JUMPS) {
        let before = checker.millis(0, 200);
        schedule = schedule
            .wait(before)
            .then(Action::ClockJump(jump_ms))
            .wait(ttl + ms(400) - before);
    }
    let early = ttl.mul_f64(rate - 1.0) + ms(jump_ms as u64);
    if drift.is_none() {
        assert!(
            early < default_drift(ttl),
            "the skew must stay inside the allowance"
        );
    }
    println!(
        "[chaos] keys expire up to {early:?} early; default drift allowance {:?}",
        default_drift(ttl)
    );
    let all: Vec<usize> = (0..NODES).collect();
    let cluster = Cluster::start_skewed(NODES, Persistence::None, SkewedClock::new(1.0, 0), &all);
    checker.run(cluster, schedule).await.0
}

#[tokio::test]
async fn all_clocks_fast_within_the_drift_allowance_keep_mutual_exclusion() {
    // 15 ms early is inside the 22 ms allowance of a 2 s ttl.
    let report = all_clocks_slightly_fast(
        "all clocks 0.5% fast + 5 ms jumps (inside the drift allowance)",
        None,
        1.005,
        5,
    )
    .await;
    report.assert_safe();
    report.assert_live();
    assert!(report.losses > 0, "holders ran into the end of their validity");
}

#[tokio::test]
async fn all_clocks_jumping_without_a_drift_allowance_detects_overlap() {
    // Forward jumps with the allowance set to zero: a jump inside a hold
    // makes the keys expire CONTROL_JUMP_MS before the holder's validity
    // ends, and the checker sees the next holder enter in between. This is
    // what gives the zero above its weight. A steady rate error is no longer
    // a control: the clients measure it (to within 0.2 %) and shorten the
    // validity by it. A jump inside a hold is seen only afterwards, as a
    // burst of rate that shortens the next locks; the first one overlaps.
    let report = all_clocks_slightly_fast(
        "UNSAFE: all clocks with 100 ms jumps, drift allowance 0",
        Some((0.0, Duration::ZERO)),
        1.0,
        CONTROL_JUMP_MS,
    )
    .await;
    report.assert_no_panic();
    assert!(
        report.overlaps > 0,
        "the checker must detect a holder overlapping by up to {CONTROL_JUMP_MS} ms"
    );
}
