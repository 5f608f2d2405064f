//! Known unsafe conditions: a majority restarted empty (no persistence) and
//! a majority's clock 2x fast. The library cannot make them safe, and the
//! checker must see the overlap, which gives the zeros of the other modules
//! their weight. Also the remedy for nodes without persistence (a delayed
//! restart), which must keep mutual exclusion, and the checker's own rule
//! of what counts as an overlap.

use std::time::Duration;

use quorumlock_testkit::checker::{Api, Checker, Holding, Renewal, ci_or_soak, overlaps};
use quorumlock_testkit::faults::{Action, Cluster, Schedule};
use quorumlock_testkit::{Persistence, SkewedClock};
use tokio::time::Instant;

use super::{NODES, majority, ms};

/// Majority crashes with a delayed restart in CI.
const CI_DELAYED_RESTARTS: usize = 1;

/// Majority crashes with a delayed restart in the soak: each catches a
/// holder, which must be told, and ends with an empty majority that must not
/// grant before every earlier lock has expired.
const SOAK_DELAYED_RESTARTS: usize = 10;

#[tokio::test]
async fn majority_restart_without_persistence_detects_overlap() {
    // A holder with a long ttl; a majority restarts empty under it. The
    // other contender takes the lock on the empty majority before the
    // holder's watchdog comes round (every ttl/3 = 2 s) to heal its keys or
    // notice the other token: two holders.
    let ttl = Duration::from_secs(6);
    let mut checker = Checker::new("UNSAFE: majority restarted empty (no persistence)")
        .contenders(2)
        .ttl(ttl)
        .hold(ms(1500), ms(2000))
        .tail(ms(500));
    let nodes = majority(&mut checker);
    let schedule = Schedule::new()
        .await_acquisition()
        .wait(ms(200))
        .then(Action::Restart(nodes))
        .wait(ms(1500));
    let (report, _cluster) = checker
        .run(Cluster::start(NODES, Persistence::None), schedule)
        .await;
    report.assert_no_panic();
    assert!(
        report.overlaps > 0,
        "the checker must detect the second holder granted by the empty majority"
    );
}

#[tokio::test]
async fn majority_restarted_after_the_ttl_keeps_mutual_exclusion() {
    // The remedy for nodes without persistence: keep a restarted node down
    // for longer than the largest ttl, so that every lock it held has expired
    // everywhere before it takes part again.
    let ttl = Duration::from_secs(1);
    // Holds longer than the ttl: the holder caught by the crash runs into
    // the end of its validity (it cannot renew) and is told.
    let mut checker = Checker::new("majority restarted empty after the ttl (delayed restart)")
        .api(Api::Mixed)
        .hold(ttl + ms(200), ttl + ms(500))
        .tail(ms(1000));
    let mut schedule = Schedule::new();
    for _ in 0..ci_or_soak(CI_DELAYED_RESTARTS, SOAK_DELAYED_RESTARTS) {
        let nodes = majority(&mut checker);
        let down = ttl + checker.millis(100, 400);
        schedule = schedule
            .await_acquisition()
            .wait(ms(100))
            .then(Action::Kill(nodes.clone()))
            .wait(down)
            .then(Action::Start(nodes))
            .wait(ms(300));
    }
    let (report, _cluster) = checker
        .run(Cluster::start(NODES, Persistence::None), schedule)
        .await;
    report.assert_safe();
    assert!(report.losses > 0, "the holder caught by the crash is told");
    assert!(
        report.acquisitions > 1,
        "the lock is granted again after the restart"
    );
}

#[tokio::test]
async fn majority_clock_2x_fast_detects_overlap() {
    // A holder relying on its validity alone (no renewal), working for 1.8 s
    // of its 2 s ttl; two of three nodes' clocks switch to 2x right after it
    // acquired, so its keys expire there after about 1 s and the other
    // contender takes the lock while the holder is still working.
    let ttl = Duration::from_secs(2);
    let mut checker = Checker::new("UNSAFE: majority clock 2x fast")
        .contenders(2)
        .ttl(ttl)
        .renewal(Renewal::Off)
        .hold(ms(1800), ms(1800))
        .tail(ms(500));
    let nodes = majority(&mut checker);
    let schedule = Schedule::new()
        .await_acquisition()
        .then(Action::ClockRate(2.0))
        .wait(ms(1500));
    let cluster = Cluster::start_skewed(NODES, Persistence::None, SkewedClock::new(1.0, 0), &nodes);
    let (report, _cluster) = checker.run(cluster, schedule).await;
    report.assert_no_panic();
    assert!(
        report.overlaps > 0,
        "the checker must detect the second holder granted by the fast majority"
    );
}

#[test]
fn overlap_detection_counts_intersecting_holdings_only() {
    let t0 = Instant::now();
    let holding = |contender, enter: u64, stop: u64, valid_until: u64| Holding {
        contender,
        enter: t0 + ms(enter),
        stop: t0 + ms(stop),
        valid_until: t0 + ms(valid_until),
        lost: false,
        degraded: false,
        fence: None,
    };
    // Back to back: no overlap (the second enters when the first has left).
    assert!(overlaps(&[holding(0, 0, 100, 900), holding(1, 100, 200, 1000)]).is_empty());
    // The first stops after its validity: its critical section ends at
    // valid_until, before the second entered.
    assert!(overlaps(&[holding(0, 0, 130, 100), holding(1, 110, 200, 1000)]).is_empty());
    // Inside at once.
    assert_eq!(
        overlaps(&[
            holding(0, 0, 100, 900),
            holding(1, 50, 200, 1000),
            holding(2, 300, 400, 1000)
        ]),
        vec![(0, 1)]
    );
    assert_eq!(holding(0, 0, 130, 100).signal_lag(), ms(30));
}
