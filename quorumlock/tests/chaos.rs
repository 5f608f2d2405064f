//! Chaos scenarios: contenders hold one lock over three real redis-server
//! nodes while nodes crash, pause, drop off the network, slow down, run on
//! skewed clocks or speak garbage, and the checker looks for two holders
//! inside at once (see `quorumlock_testkit::checker`).
//!
//! Each test asserts the property its name states and prints a report row
//! (`cargo test --test chaos -- --nocapture` shows them; docs/reliability.md
//! collects them). The `*_detects_overlap` tests run conditions the library
//! cannot make safe and assert that the checker sees the overlap, so that a
//! zero elsewhere means something.
//!
//! Environment:
//! - `QUORUMLOCK_CHAOS_SEED=<u64>`: every scenario prints its seed at the
//!   start; setting it makes a rerun take the same random choices (fault
//!   timing, chosen nodes, contender jitter). The interleaving with real
//!   servers still varies from run to run.
//! - `QUORUMLOCK_CHAOS_SOAK=1`: long schedules (ten to forty times the
//!   fault cycles or fault time of the default run) with twice the
//!   contenders and short holds (see `quorumlock_testkit::checker::SOAK_HOLD`),
//!   for many acquisitions while faults are in force: about eleven minutes
//!   for the file on a 2-core machine (three and a half of them for the
//!   fast-clock scenario), against about half a minute.

use std::time::Duration;

use quorumlock::{DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED, Error, NodeErrorKind, Redlock};
use quorumlock_testkit::checker::{Api, Checker, Holding, RESOURCE, Renewal, Report, ci_or_soak, overlaps};
use quorumlock_testkit::fake::{FakeNode, Misbehaviour};
use quorumlock_testkit::faults::{Action, Cluster, Schedule};
use quorumlock_testkit::{PanicProbe, Persistence, SkewedClock, dbsize, eventually, get, start_nodes, urls};
use rand::RngExt;
use tokio::time::Instant;

const NODES: usize = 3;

/// Fault cycles (a fault, then its heal) of each minority crash, pause and
/// partition scenario in CI: two, so that the partition scenario has one
/// black hole and one refusal, in about 3 s of schedule.
const CI_MINORITY_CYCLES: usize = 2;

/// Fault cycles of each minority crash, pause and partition scenario in the
/// soak: with the soak's short holds a cycle grants the lock some 15-70
/// times while its fault is in force (fewest with a black hole, whose split
/// attempts wait out the node timeout), so these three scenarios make about
/// half of the soak's acquisitions during faults, in 100-135 s each.
const SOAK_MINORITY_CYCLES: usize = 80;

/// How long a minority stays slow in CI: a dozen hand-offs over the slow
/// node at the CI holds.
const CI_SLOW_FOR: Duration = Duration::from_secs(3);

/// How long a minority stays slow in the soak. An attempt granted by one
/// fast node and refused by the other waits out the slow node's 100 ms
/// round trip, and with the soak's contenders retrying every few
/// milliseconds the three nodes are often split three ways, so nobody wins:
/// the lock changes hands about 3 times a second here (about 19 with two
/// contenders). The length buys hand-offs over the slow node (a late SET
/// followed by its release), not volume.
const SOAK_SLOW_FOR: Duration = Duration::from_secs(90);

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

/// How long the contended run over a misbehaving node lasts in CI.
const CI_BROKEN_NODE_FOR: Duration = Duration::from_secs(2);

/// How long the contended run over a misbehaving node lasts in the soak: the
/// fault is in force throughout, and the short soak holds grant the lock
/// some 65 times a second, about 4,000 grants per kind of misbehaviour.
const SOAK_BROKEN_NODE_FOR: Duration = Duration::from_secs(60);

/// Majority pauses in CI (each one ttl long, plus the wait for a holder).
const CI_MAJORITY_PAUSES: usize = 1;

/// Majority pauses in the soak: a loss signal per pause, each from a holder
/// caught at a different point of its hold.
const SOAK_MAJORITY_PAUSES: usize = 10;

/// Majority partitions in CI: one black hole and one refusal.
const CI_MAJORITY_PARTITIONS: usize = 2;

/// Majority partitions in the soak: ten of each kind, as the pauses.
const SOAK_MAJORITY_PARTITIONS: usize = 20;

/// Forward clock jumps in the all-clocks-fast scenarios in CI, one per hold.
const CI_CLOCK_JUMPS: usize = 2;

/// Forward clock jumps in the all-clocks-fast scenarios in the soak: each is
/// a hand-over 10-15 ms after the keys expired, which the unsafe control
/// must see as an overlap and the safe one must not (about 70 s).
const SOAK_CLOCK_JUMPS: usize = 30;

/// Majority crashes with a delayed restart in CI.
const CI_DELAYED_RESTARTS: usize = 1;

/// Majority crashes with a delayed restart in the soak: each catches a
/// holder, which must be told, and ends with an empty majority that must not
/// grant before every earlier lock has expired.
const SOAK_DELAYED_RESTARTS: usize = 10;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The library's default drift allowance for `ttl`.
fn default_drift(ttl: Duration) -> Duration {
    ttl.mul_f64(DEFAULT_DRIFT_FACTOR) + DEFAULT_DRIFT_FIXED
}

/// Two of the three nodes, chosen at random: a majority.
fn majority(checker: &mut Checker) -> Vec<usize> {
    let spared = checker.rng().random_range(0..NODES);
    (0..NODES).filter(|&i| i != spared).collect()
}

/// One of the three nodes, chosen at random: a minority.
fn minority(checker: &mut Checker) -> Vec<usize> {
    vec![checker.rng().random_range(0..NODES)]
}

// 1. Minority faults: 0 overlaps, and the lock keeps being granted.

#[tokio::test]
async fn minority_crash_and_restart_with_aof_keeps_mutual_exclusion() {
    let mut checker = Checker::new("minority crash + restart (AOF always)")
        .renewal(Renewal::Mixed)
        .api(Api::Mixed);
    let mut schedule = Schedule::new();
    for _ in 0..ci_or_soak(CI_MINORITY_CYCLES, SOAK_MINORITY_CYCLES) {
        // A crash that stays down a while, then one restarted at once.
        let (crashed, restarted) = (minority(&mut checker), minority(&mut checker));
        let (before, down, after) = (
            checker.millis(100, 400),
            checker.millis(500, 1500),
            checker.millis(100, 400),
        );
        schedule = schedule
            .wait(before)
            .then(Action::Kill(crashed.clone()))
            .wait(down)
            .then(Action::Start(crashed))
            .wait(after)
            .then(Action::Restart(restarted));
    }
    let cluster = Cluster::start(NODES, Persistence::AofAlways);
    let (report, _cluster) = checker.run(cluster, schedule).await;
    report.assert_safe();
    report.assert_live();
}

#[tokio::test]
async fn minority_pause_keeps_mutual_exclusion() {
    let mut checker = Checker::new("minority pause (SIGSTOP)")
        .renewal(Renewal::Mixed)
        .api(Api::Mixed);
    let mut schedule = Schedule::new();
    for _ in 0..ci_or_soak(CI_MINORITY_CYCLES, SOAK_MINORITY_CYCLES) {
        let node = minority(&mut checker);
        let (before, paused) = (checker.millis(100, 400), checker.millis(500, 1500));
        schedule = schedule
            .wait(before)
            .then(Action::Pause(node.clone()))
            .wait(paused)
            .then(Action::Resume(node));
    }
    let (report, _cluster) = checker
        .run(Cluster::start(NODES, Persistence::None), schedule)
        .await;
    report.assert_safe();
    report.assert_live();
}

#[tokio::test]
async fn minority_partition_keeps_mutual_exclusion() {
    let mut checker = Checker::new("minority partition (black hole, refuse)")
        .renewal(Renewal::Mixed)
        .api(Api::Mixed);
    let mut schedule = Schedule::new();
    for cycle in 0..ci_or_soak(CI_MINORITY_CYCLES, SOAK_MINORITY_CYCLES) {
        let node = minority(&mut checker);
        let (before, cut) = (checker.millis(100, 400), checker.millis(500, 1500));
        let fault = if cycle % 2 == 0 {
            Action::BlackHole(node.clone())
        } else {
            Action::Refuse(node.clone())
        };
        schedule = schedule
            .wait(before)
            .then(fault)
            .wait(cut)
            .then(Action::Heal(node));
    }
    let cluster = Cluster::start(NODES, Persistence::None).with_proxies();
    let (report, _cluster) = checker.run(cluster, schedule).await;
    report.assert_safe();
    report.assert_live();
}

#[tokio::test]
async fn minority_with_50ms_latency_keeps_mutual_exclusion() {
    let mut checker = Checker::new("50 ms latency each way on a minority")
        .renewal(Renewal::Mixed)
        .api(Api::Mixed);
    let node = minority(&mut checker);
    let slow = ci_or_soak(CI_SLOW_FOR, SOAK_SLOW_FOR);
    let schedule = Schedule::new()
        .wait(ms(100))
        .then(Action::Latency(node.clone(), ms(50)))
        .wait(slow)
        .then(Action::Heal(node));
    let cluster = Cluster::start(NODES, Persistence::None).with_proxies();
    let (report, _cluster) = checker.run(cluster, schedule).await;
    report.assert_safe();
    report.assert_live();
}

// 2. Majority faults shorter than the ttl: 0 overlaps, holders told.

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

// 3. Clock skew: a minority far outside the allowance, which the clients
// measure, and every clock within it: 0 overlaps.

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
    // makes the keys expire 20 ms before the holder's validity ends, and
    // the checker sees the next holder enter in between. This is what gives
    // the zero above its weight. A steady rate error is no longer a control:
    // the clients measure it (to within 0.2 %) and shorten the validity by
    // it. A jump inside a hold is seen only afterwards, as a burst of rate
    // that shortens the next locks; the first one overlaps.
    let report = all_clocks_slightly_fast(
        "UNSAFE: all clocks with 20 ms jumps, drift allowance 0",
        Some((0.0, Duration::ZERO)),
        1.0,
        20,
    )
    .await;
    report.assert_no_panic();
    assert!(
        report.overlaps > 0,
        "the checker must detect a holder overlapping by up to 20 ms"
    );
}

// 4. Known unsafe conditions: the checker must see the overlap.

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

// 5. Bad network input: broken nodes are failed nodes, nothing else.

/// 2 real nodes + 1 fake: locks are granted and released; 1 real + 2
/// fakes: every attempt fails as `Unreachable` with the fakes as failed
/// nodes; a contended run over 2 real + 1 fake stays safe; no panic and no
/// key left on the real nodes.
async fn broken_node_is_a_failed_node(misbehaviour: Misbehaviour, scenario: &str) {
    let mut checker = Checker::new(scenario);
    let seed = checker.rng().random::<u64>();
    let probe = PanicProbe::start();
    let ttl = Duration::from_secs(10);
    let real = start_nodes(2);
    let fakes = [
        FakeNode::start(misbehaviour, seed),
        FakeNode::start(misbehaviour, seed + 1),
    ];
    let node_timeout = ms(150);

    let mut urls = urls(&real);
    urls.push(fakes[0].url());
    let two_real = Redlock::builder()
        .nodes(urls)
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    for round in 0..20 {
        let guard = two_real
            .try_lock("bad-input", ttl)
            .await
            .unwrap_or_else(|e| panic!("round {round}: 2 of 3 nodes are healthy: {e}"))
            .expect("free resource");
        for server in &real {
            assert_eq!(get(server, "bad-input").as_deref(), Some(guard.token()));
        }
        let released = guard.release().await.expect("2 real nodes confirm the release");
        assert!(released.confirmed >= 2, "round {round}: {released:?}");
        // Released on the real nodes (the release returns at a majority of
        // answers, which may include the fake's; the rest follows).
        eventually(
            &format!("round {round}: released on the real nodes"),
            Duration::from_secs(5),
            || real.iter().all(|s| dbsize(s) == 0),
        )
        .await;
    }

    let one_real = Redlock::builder()
        .nodes([real[0].url(), fakes[0].url(), fakes[1].url()])
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    for round in 0..20 {
        match one_real.try_lock("bad-input", ttl).await {
            Err(Error::Unreachable {
                succeeded,
                refused: 0,
                errors,
                ..
            }) => {
                assert!(succeeded <= 1);
                assert_eq!(errors.len(), 2, "round {round}: {errors:?}");
                for error in &errors {
                    assert!(
                        fakes
                            .iter()
                            .any(|f| error.node.starts_with(&format!("127.0.0.1:{}/", f.port()))),
                        "round {round}: only the fakes fail: {error}"
                    );
                    assert!(matches!(
                        error.kind,
                        NodeErrorKind::Redis(_) | NodeErrorKind::Timeout(_)
                    ));
                }
            }
            other => panic!("round {round}: expected Unreachable, got {other:?}"),
        }
        // The failed attempt released the real node before returning, or at
        // least sent the release (it runs behind the SET on the same
        // connection): the key is gone long before its 10 s ttl.
        let deadline = Instant::now() + ms(500);
        while dbsize(&real[0]) != 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: a failed attempt leaked its key"
            );
            tokio::time::sleep(ms(5)).await;
        }
    }
    assert!(
        fakes.iter().all(|f| f.misbehaved() > 0),
        "the fakes were exercised"
    );
    assert!(probe.panics().is_empty(), "panics: {:?}", probe.panics());

    // Contenders over 2 real nodes and the misbehaving one.
    let [fake, _] = fakes;
    let cluster = Cluster::from_servers(real).with_fake(fake);
    let schedule = Schedule::new().wait(ci_or_soak(CI_BROKEN_NODE_FOR, SOAK_BROKEN_NODE_FOR));
    let (report, cluster) = checker.tail(ms(0)).run(cluster, schedule).await;
    report.assert_safe();
    assert!(report.acquisitions > 0);
    let deadline = Instant::now() + ms(500);
    while cluster.dbsizes().iter().any(|n| *n != Some(0)) {
        assert!(Instant::now() < deadline, "keys left: {:?}", cluster.dbsizes());
        tokio::time::sleep(ms(5)).await;
    }
}

#[tokio::test]
async fn node_answering_wrong_reply_types_is_a_failed_node_and_leaks_nothing() {
    broken_node_is_a_failed_node(
        Misbehaviour::WrongType,
        "one node answers replies of the wrong type",
    )
    .await;
}

#[tokio::test]
async fn node_answering_garbage_is_a_failed_node_and_leaks_nothing() {
    broken_node_is_a_failed_node(Misbehaviour::Garbage, "one node answers garbage").await;
}

#[tokio::test]
async fn node_closing_mid_reply_is_a_failed_node_and_leaks_nothing() {
    broken_node_is_a_failed_node(
        Misbehaviour::CloseMidReply,
        "one node closes connections mid-reply",
    )
    .await;
}
