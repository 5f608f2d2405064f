//! The mutual-exclusion checker of the chaos suite.
//!
//! `C` contenders (tasks, each with its own [`Redlock`] client, hence its own
//! connections and watchdog, as separate processes would have) contend for
//! one resource while a [`Schedule`] of faults runs against the [`Cluster`].
//! Every holder records when it entered and left its critical section on
//! the monotonic clock in a shared history; the [`Report`] counts rounds,
//! acquisitions, losses, faults and **overlaps**: two holders inside at once.
//!
//! # What a holder records
//!
//! A holder works in short steps and takes a step only after
//! [`Guard::is_held`] said yes; between steps it waits for the step's time or
//! for [`Guard::lost`], whichever comes first, and stops at once on a loss.
//! - `enter`: when the lock was granted (`try_lock` returned the guard, or
//!   `with_lock` started the work).
//! - `stop`: when it stopped working (its hold was done, it saw the loss,
//!   or `with_lock` dropped the work on a loss).
//! - `leave`: the earlier of `stop` and the guard's final `valid_until`. The
//!   lock promises exclusivity up to `valid_until`, and a holder takes no
//!   step after it (each step is preceded by `is_held`), so the time a
//!   holder spends waiting to be scheduled past `valid_until` is not work.
//!   How late holders learned of a loss (`stop - valid_until`) is reported
//!   separately as the signal lag.
//!
//! Two holdings overlap when `[enter, leave]` of one intersects that of the
//! other. Within one process the clock is the same for everyone, so this is
//! exact, up to the moment a reply is read versus the moment it was sent.
//!
//! # Randomness
//!
//! Contender jitter (hold times, pauses between attempts) and the fault
//! timing a scenario draws from [`Checker::rng`] come from one seed, printed
//! at the start of each scenario and settable with `QUORUMLOCK_CHAOS_SEED`.
//! A rerun with the same seed makes the same random choices; the
//! interleaving with real servers still varies.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use quorumlock::{Error, Guard, Redlock};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::faults::{Cluster, Schedule, Step};

/// Environment variable that fixes the seed of every scenario.
pub const SEED_VAR: &str = "QUORUMLOCK_CHAOS_SEED";

/// Environment variable that turns on the long (soak) schedules: `1`.
pub const SOAK_VAR: &str = "QUORUMLOCK_CHAOS_SOAK";

/// How long a schedule's `await_acquisition` waits before the scenario fails.
const AWAIT_LIMIT: Duration = Duration::from_secs(20);

/// How late a holder may see a loss after its `valid_until` in a safe
/// scenario: scheduling slack on a loaded 2-core CI machine. A loss signal
/// that does not fire shows up as the rest of the hold (hundreds of ms).
pub const SIGNAL_TOLERANCE: Duration = Duration::from_millis(250);

/// Whether the long schedules are asked for (`QUORUMLOCK_CHAOS_SOAK=1`).
pub fn soak() -> bool {
    std::env::var(SOAK_VAR).is_ok_and(|v| v == "1")
}

/// `ci` normally, `soak` under `QUORUMLOCK_CHAOS_SOAK=1`.
pub fn ci_or_soak(ci: usize, soak_count: usize) -> usize {
    if soak() { soak_count } else { ci }
}

/// Which contenders let the watchdog renew their lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Every contender (the library's default).
    Auto,
    /// None: holders rely on the validity of the acquisition alone, and a
    /// hold longer than that runs into the end of the validity.
    Off,
    /// Even contenders renew, odd ones do not.
    Mixed,
}

/// How contenders take the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `try_lock`, then steps while `is_held`, then `release` (the default).
    TryLock,
    /// `with_lock` (waiting with the library's retry), steps inside the
    /// closure; the library drops the closure's future when the lock is lost.
    WithLock,
    /// Every third contender (ids 2, 5, ..) uses `with_lock`, the others
    /// `try_lock`.
    Mixed,
}

/// One critical section, as its holder recorded it.
#[derive(Clone, Debug)]
pub struct Holding {
    pub contender: usize,
    pub enter: Instant,
    pub stop: Instant,
    /// The guard's `valid_until` when the holder stopped.
    pub valid_until: Instant,
    /// The holder saw the loss (`is_held` false or `lost()`) before its hold
    /// was done.
    pub lost: bool,
    /// A fault was in force when the lock was granted.
    pub degraded: bool,
}

impl Holding {
    /// The end of the critical section: `stop`, or `valid_until` if earlier.
    pub fn leave(&self) -> Instant {
        self.stop.min(self.valid_until)
    }

    /// How long after `valid_until` the holder stopped.
    pub fn signal_lag(&self) -> Duration {
        self.stop.saturating_duration_since(self.valid_until)
    }
}

/// The pairs `(i, j)`, `i < j`, of holdings whose `[enter, leave]` intersect.
pub fn overlaps(history: &[Holding]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for (i, a) in history.iter().enumerate() {
        for (j, b) in history.iter().enumerate().skip(i + 1) {
            if a.enter < b.leave() && b.enter < a.leave() {
                pairs.push((i, j));
            }
        }
    }
    pairs
}

/// The shortest `enter - leave` between a holding and any later-entering
/// one, in milliseconds (negative for an overlap). `history` sorted by enter.
fn closest_handover(history: &[Holding]) -> Option<f64> {
    let ms = |a: Instant, b: Instant| {
        if a >= b {
            (a - b).as_secs_f64() * 1e3
        } else {
            -(b - a).as_secs_f64() * 1e3
        }
    };
    history
        .iter()
        .enumerate()
        .flat_map(|(i, a)| history[i + 1..].iter().map(move |b| ms(b.enter, a.leave())))
        .min_by(f64::total_cmp)
}

/// What a scenario run saw.
#[derive(Debug)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub contenders: usize,
    /// Lock attempts, over all contenders.
    pub rounds: usize,
    pub acquisitions: usize,
    /// Acquisitions granted while a fault was in force.
    pub acquisitions_degraded: usize,
    /// Attempts refused because another owner held the lock.
    pub contended: usize,
    /// Attempts that failed with an error, by kind.
    pub errors: BTreeMap<&'static str, usize>,
    /// Holders that saw the loss signal before their hold was done.
    pub losses: usize,
    /// Fault actions applied (not counting heals, resumes and starts).
    pub faults: usize,
    /// The kinds of fault actions applied, in order of first use.
    pub fault_kinds: Vec<&'static str>,
    /// `+elapsed action` for every action applied.
    pub fault_log: Vec<String>,
    /// Pairs of holders inside at once.
    pub overlaps: usize,
    /// The first few overlaps, described.
    pub overlap_examples: Vec<String>,
    /// The shortest time between one holder leaving and the next entering
    /// (negative: they overlapped), in milliseconds; `None` with fewer than
    /// two holdings. How close the contenders came to each other.
    pub closest_handover_ms: Option<f64>,
    /// The longest time a holder kept going past its `valid_until`.
    pub max_signal_lag: Duration,
    /// Releases that did not reach a majority.
    pub release_failures: usize,
    /// Panics seen on the scenario's threads (including spawned tasks).
    pub panics: Vec<String>,
    pub elapsed: Duration,
    pub history: Vec<Holding>,
}

impl Report {
    /// The header of [`Report::row`].
    pub const HEADER: &'static str = "| scenario | faults injected | rounds | acquisitions (during faults) | losses signalled | overlaps |";

    /// One markdown table row: scenario, faults, rounds, acquisitions, losses, overlaps.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} ({}) | {} | {} ({}) | {} | {} |",
            self.scenario,
            self.faults,
            if self.fault_kinds.is_empty() {
                "none".to_string()
            } else {
                self.fault_kinds.join(", ")
            },
            self.rounds,
            self.acquisitions,
            self.acquisitions_degraded,
            self.losses,
            self.overlaps
        )
    }

    /// Prints the fault log, the counters and the table row.
    pub fn print(&self) {
        let mut out = String::new();
        for line in &self.fault_log {
            let _ = writeln!(out, "[chaos]   {line}");
        }
        let _ = writeln!(
            out,
            "[chaos] {} (seed {}): {} contenders, {:.1} s, refused {}, errors {:?}, release failures {}, \
             closest hand-over {}, max signal lag {:?}, panics {}",
            self.scenario,
            self.seed,
            self.contenders,
            self.elapsed.as_secs_f64(),
            self.contended,
            self.errors,
            self.release_failures,
            self.closest_handover_ms
                .map_or("-".to_string(), |ms| format!("{ms:.1} ms")),
            self.max_signal_lag,
            self.panics.len()
        );
        for example in &self.overlap_examples {
            let _ = writeln!(out, "[chaos]   overlap: {example}");
        }
        let _ = writeln!(out, "{}\n{}", Report::HEADER, self.row());
        print!("{out}");
    }

    /// The safety property: no two holders inside at once, no panic, and
    /// every holder stopped by its `valid_until` (within scheduling slack).
    pub fn assert_safe(&self) {
        assert_eq!(
            self.overlaps, 0,
            "{}: two holders were inside at once (seed {}): {:#?}",
            self.scenario, self.seed, self.overlap_examples
        );
        self.assert_no_panic();
        assert!(
            self.max_signal_lag <= SIGNAL_TOLERANCE,
            "{}: a holder kept going {:?} past its valid_until (seed {})",
            self.scenario,
            self.max_signal_lag,
            self.seed
        );
    }

    /// No panic anywhere in the client (tasks included).
    pub fn assert_no_panic(&self) {
        assert!(
            self.panics.is_empty(),
            "{}: panics: {:?}",
            self.scenario,
            self.panics
        );
    }

    /// Liveness: the lock was granted, also while faults were in force.
    pub fn assert_live(&self) {
        assert!(
            self.acquisitions > 0,
            "{}: never acquired (seed {})",
            self.scenario,
            self.seed
        );
        assert!(
            self.acquisitions_degraded > 0,
            "{}: never acquired while a fault was in force (seed {})",
            self.scenario,
            self.seed
        );
    }
}

/// A scenario: its contenders' settings and its seed.
#[derive(Debug)]
#[must_use]
pub struct Checker {
    scenario: String,
    seed: u64,
    rng: StdRng,
    plan: Plan,
    tail: Duration,
}

/// What every contender does.
#[derive(Clone, Debug)]
struct Plan {
    contenders: usize,
    resource: String,
    ttl: Duration,
    node_timeout: Duration,
    renewal: Renewal,
    api: Api,
    /// `(factor, fixed)` of the drift allowance; the library's default if `None`.
    drift: Option<(f64, Duration)>,
    /// Hold time per acquisition, drawn from `[min, max]`.
    hold: (Duration, Duration),
    step: Duration,
    /// Pause after each attempt (and after each hold), drawn from `[min, max]`.
    retry: (Duration, Duration),
    max_rounds: Option<usize>,
}

impl Checker {
    /// A scenario named `scenario`; prints its seed. Defaults: 3 contenders,
    /// ttl 1 s, per-node timeout 150 ms, auto-renewal, holds of 50-300 ms in
    /// 20 ms steps, 5-40 ms between attempts, 500 ms of running after the
    /// last fault.
    pub fn new(scenario: &str) -> Checker {
        let seed = std::env::var(SEED_VAR)
            .ok()
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{SEED_VAR}={s:?} is not a u64"))
            })
            .unwrap_or_else(rand::random);
        println!("[chaos] {scenario}: seed {seed} (rerun with {SEED_VAR}={seed})");
        // Each scenario draws its own stream from the one seed.
        let stream = scenario.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Checker {
            scenario: scenario.to_string(),
            seed,
            rng: StdRng::seed_from_u64(seed ^ stream),
            plan: Plan {
                contenders: 3,
                resource: "chaos:resource".to_string(),
                ttl: Duration::from_secs(1),
                node_timeout: Duration::from_millis(150),
                renewal: Renewal::Auto,
                api: Api::TryLock,
                drift: None,
                hold: (Duration::from_millis(50), Duration::from_millis(300)),
                step: Duration::from_millis(20),
                retry: (Duration::from_millis(5), Duration::from_millis(40)),
                max_rounds: None,
            },
            tail: Duration::from_millis(500),
        }
    }

    /// The scenario's random source, for fault timing.
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// A duration drawn uniformly from `[min_ms, max_ms]`.
    pub fn millis(&mut self, min_ms: u64, max_ms: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(min_ms..=max_ms))
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn contenders(mut self, n: usize) -> Checker {
        self.plan.contenders = n;
        self
    }

    pub fn ttl(mut self, ttl: Duration) -> Checker {
        self.plan.ttl = ttl;
        self
    }

    pub fn node_timeout(mut self, timeout: Duration) -> Checker {
        self.plan.node_timeout = timeout;
        self
    }

    pub fn renewal(mut self, renewal: Renewal) -> Checker {
        self.plan.renewal = renewal;
        self
    }

    pub fn api(mut self, api: Api) -> Checker {
        self.plan.api = api;
        self
    }

    /// The clients' drift allowance, `ttl * factor + fixed` (the default is
    /// the library's).
    pub fn drift(mut self, factor: f64, fixed: Duration) -> Checker {
        self.plan.drift = Some((factor, fixed));
        self
    }

    /// Each hold lasts between `min` and `max` (unless the lock is lost).
    pub fn hold(mut self, min: Duration, max: Duration) -> Checker {
        self.plan.hold = (min, max);
        self
    }

    /// Time between two steps of a holder (and two `is_held` checks).
    pub fn step(mut self, step: Duration) -> Checker {
        self.plan.step = step;
        self
    }

    /// Pause after each attempt, drawn from `[min, max]`.
    pub fn retry(mut self, min: Duration, max: Duration) -> Checker {
        self.plan.retry = (min, max);
        self
    }

    /// How long the contenders keep going after the schedule's last step.
    pub fn tail(mut self, tail: Duration) -> Checker {
        self.tail = tail;
        self
    }

    /// At most this many attempts per contender.
    pub fn max_rounds(mut self, rounds: usize) -> Checker {
        self.plan.max_rounds = Some(rounds);
        self
    }

    /// Runs the contenders against `cluster` while `schedule` runs, then
    /// [`Checker::tail`] longer; prints and returns the report and gives the
    /// cluster back (faults still in force, for the test to inspect).
    pub async fn run(mut self, cluster: Cluster, schedule: Schedule) -> (Report, Cluster) {
        let probe = PanicProbe::start();
        let plan = Arc::new(self.plan.clone());
        let shared = Arc::new(Shared {
            acquisitions: AtomicU64::new(0),
            degraded: AtomicBool::new(cluster.is_degraded()),
            history: Mutex::new(Vec::new()),
            stop: CancellationToken::new(),
        });
        let urls = cluster.urls();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for id in 0..plan.contenders {
            let renew = match plan.renewal {
                Renewal::Auto => true,
                Renewal::Off => false,
                Renewal::Mixed => id % 2 == 0,
            };
            // Its own client: its own connections and watchdog.
            let with_lock = match plan.api {
                Api::TryLock => false,
                Api::WithLock => true,
                Api::Mixed => id % 3 == 2,
            };
            // `with_lock` waits with the library's retry: keep its attempts
            // about as frequent as the others', and its waits short.
            let mut builder = Redlock::builder()
                .nodes(urls.clone())
                .node_timeout(plan.node_timeout)
                .auto_renew(renew)
                .retry_delay((plan.retry.0 + plan.retry.1).max(Duration::from_millis(2)))
                .wait(plan.ttl / 2);
            if let Some((factor, fixed)) = plan.drift {
                builder = builder.drift(factor, fixed);
            }
            let redlock = builder.build().expect("valid chaos client");
            let rng = StdRng::seed_from_u64(self.rng.random());
            tasks.push(tokio::spawn(contend(
                id,
                redlock,
                with_lock,
                Arc::clone(&plan),
                Arc::clone(&shared),
                rng,
            )));
        }
        let schedule_task = {
            let shared = Arc::clone(&shared);
            tokio::task::spawn_blocking(move || run_schedule(cluster, &schedule, &shared, started))
        };
        let outcome = schedule_task.await;
        let (cluster, log) = match outcome {
            Ok(done) => done,
            Err(e) => {
                shared.stop.cancel();
                std::panic::resume_unwind(e.into_panic())
            }
        };
        tokio::time::sleep(self.tail).await;
        shared.stop.cancel();
        let mut stats = Stats::default();
        for task in tasks {
            match task.await {
                Ok(s) => stats.add(s),
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        let mut history = std::mem::take(&mut *shared.history.lock().unwrap());
        history.sort_by_key(|h| h.enter);
        let pairs = overlaps(&history);
        let at = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
        let overlap_examples = pairs
            .iter()
            .take(3)
            .map(|&(i, j)| {
                let (a, b) = (&history[i], &history[j]);
                format!(
                    "contender {} [{:.3}, {:.3}] s (valid until {:.3}, lost: {}) and contender {} [{:.3}, {:.3}] s",
                    a.contender,
                    at(a.enter),
                    at(a.leave()),
                    at(a.valid_until),
                    a.lost,
                    b.contender,
                    at(b.enter),
                    at(b.leave())
                )
            })
            .collect();
        let report = Report {
            scenario: self.scenario,
            seed: self.seed,
            contenders: plan.contenders,
            rounds: stats.rounds,
            acquisitions: history.len(),
            acquisitions_degraded: history.iter().filter(|h| h.degraded).count(),
            contended: stats.contended,
            errors: stats.errors,
            losses: history.iter().filter(|h| h.lost).count(),
            faults: log.faults,
            fault_kinds: log.kinds,
            fault_log: log.lines,
            overlaps: pairs.len(),
            overlap_examples,
            closest_handover_ms: closest_handover(&history),
            max_signal_lag: history.iter().map(Holding::signal_lag).max().unwrap_or_default(),
            release_failures: stats.release_failures,
            panics: probe.panics(),
            elapsed: started.elapsed(),
            history,
        };
        report.print();
        (report, cluster)
    }
}

/// State shared by the contenders and the schedule.
#[derive(Debug)]
struct Shared {
    acquisitions: AtomicU64,
    /// A fault is in force (updated by the schedule after every action).
    degraded: AtomicBool,
    history: Mutex<Vec<Holding>>,
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct Stats {
    rounds: usize,
    contended: usize,
    errors: BTreeMap<&'static str, usize>,
    release_failures: usize,
}

impl Stats {
    fn add(&mut self, other: Stats) {
        self.rounds += other.rounds;
        self.contended += other.contended;
        self.release_failures += other.release_failures;
        for (kind, n) in other.errors {
            *self.errors.entry(kind).or_default() += n;
        }
    }
}

fn between(rng: &mut StdRng, (min, max): (Duration, Duration)) -> Duration {
    if max <= min {
        return min;
    }
    let span = u64::try_from((max - min).as_micros()).unwrap_or(u64::MAX);
    min + Duration::from_micros(rng.random_range(0..=span))
}

/// One contender: attempt, hold if granted, pause, until told to stop.
async fn contend(
    id: usize,
    redlock: Redlock,
    with_lock: bool,
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    mut rng: StdRng,
) -> Stats {
    let mut stats = Stats::default();
    while !shared.stop.is_cancelled() && plan.max_rounds.is_none_or(|max| stats.rounds < max) {
        stats.rounds += 1;
        let outcome = if with_lock {
            let target = between(&mut rng, plan.hold);
            let work = async |guard: &Guard| hold_inside(id, guard, target, &plan, &shared).await;
            match redlock.with_lock(plan.resource.as_str(), plan.ttl, work).await {
                // A loss is in the history already (recorded when the
                // library dropped the work).
                Ok(()) | Err(Error::Lost { .. }) => Ok(()),
                Err(Error::Held { .. }) => {
                    stats.contended += 1;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            match redlock.try_lock(plan.resource.as_str(), plan.ttl).await {
                Ok(Some(guard)) => {
                    hold(id, guard, &plan, &shared, &mut rng, &mut stats).await;
                    Ok(())
                }
                Ok(None) => {
                    stats.contended += 1;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        };
        match outcome {
            Ok(()) => {}
            Err(e @ Error::Config(_)) => panic!("chaos contender misconfigured: {e}"),
            Err(e) => {
                let kind = match e {
                    Error::Unreachable { .. } => "unreachable",
                    Error::ValidityUsedUp { .. } => "validity used up",
                    _ => "other",
                };
                *stats.errors.entry(kind).or_default() += 1;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(between(&mut rng, plan.retry)) => {}
            () = shared.stop.cancelled() => {}
        }
    }
    stats
}

/// Records a holding when dropped: at the end of the work, or when
/// `with_lock` drops the work because the lock was lost.
struct Recorder<'a> {
    id: usize,
    guard: &'a Guard,
    shared: &'a Shared,
    enter: Instant,
    degraded: bool,
    completed: bool,
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        let stop = Instant::now();
        let holding = Holding {
            contender: self.id,
            enter: self.enter,
            stop,
            valid_until: self.guard.valid_until(),
            lost: !self.completed,
            degraded: self.degraded,
        };
        self.shared
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(holding);
    }
}

/// The work inside `with_lock`: steps while `is_held`, for `target`. Stops
/// early if `is_held` turns false; the library drops it on a loss.
async fn hold_inside(id: usize, guard: &Guard, target: Duration, plan: &Plan, shared: &Shared) {
    let mut recorder = Recorder {
        id,
        guard,
        shared,
        enter: Instant::now(),
        degraded: shared.degraded.load(Ordering::SeqCst),
        completed: false,
    };
    shared.acquisitions.fetch_add(1, Ordering::SeqCst);
    loop {
        if !guard.is_held() {
            return; // not completed: recorded as a loss
        }
        let done = recorder.enter.elapsed();
        if done >= target {
            break;
        }
        tokio::time::sleep(plan.step.min(target - done)).await;
    }
    recorder.completed = true;
}

/// The critical section: steps while `is_held`, stopping at once on a loss.
async fn hold(id: usize, guard: Guard, plan: &Plan, shared: &Shared, rng: &mut StdRng, stats: &mut Stats) {
    let enter = Instant::now();
    let degraded = shared.degraded.load(Ordering::SeqCst);
    shared.acquisitions.fetch_add(1, Ordering::SeqCst);
    let target = between(rng, plan.hold);
    let mut lost = false;
    loop {
        if !guard.is_held() {
            lost = true;
            break;
        }
        let done = enter.elapsed();
        if done >= target {
            break;
        }
        // One step of work, taken while the lock is held.
        tokio::select! {
            biased;
            () = guard.lost() => {
                lost = true;
                break;
            }
            () = tokio::time::sleep(plan.step.min(target - done)) => {}
        }
    }
    let stop = Instant::now();
    let valid_until = guard.valid_until();
    shared.history.lock().unwrap().push(Holding {
        contender: id,
        enter,
        stop,
        valid_until,
        lost,
        degraded,
    });
    if lost {
        // As `with_lock` does: the drop releases our token in the background.
        drop(guard);
    } else if guard.release().await.is_err() {
        stats.release_failures += 1;
    }
}

/// What a schedule did.
#[derive(Debug, Default)]
struct FaultLog {
    /// `+elapsed action` for every action applied.
    lines: Vec<String>,
    /// Fault actions applied.
    faults: usize,
    /// Kinds of fault actions, in order of first use.
    kinds: Vec<&'static str>,
}

/// Runs `schedule` on a blocking thread; returns the cluster and the log.
fn run_schedule(
    mut cluster: Cluster,
    schedule: &Schedule,
    shared: &Shared,
    started: Instant,
) -> (Cluster, FaultLog) {
    let mut log = FaultLog::default();
    if !cluster.fakes.is_empty() {
        // A standing fault, in place from the start.
        log.faults += cluster.fakes.len();
        log.kinds.push("fake node");
    }
    for step in &schedule.steps {
        match step {
            Step::Wait(duration) => std::thread::sleep(*duration),
            Step::AwaitAcquisition => {
                let before = shared.acquisitions.load(Ordering::SeqCst);
                let since = std::time::Instant::now();
                while shared.acquisitions.load(Ordering::SeqCst) == before {
                    assert!(
                        since.elapsed() < AWAIT_LIMIT,
                        "no contender acquired the lock within {AWAIT_LIMIT:?}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Step::Do(action) => {
                let at = started.elapsed();
                if action.is_fault() {
                    // It may take effect before `apply` returns.
                    shared.degraded.store(true, Ordering::SeqCst);
                }
                cluster.apply(action);
                shared.degraded.store(cluster.is_degraded(), Ordering::SeqCst);
                if action.is_fault() {
                    log.faults += 1;
                    if !log.kinds.contains(&action.kind()) {
                        log.kinds.push(action.kind());
                    }
                }
                log.lines.push(format!("+{:.3}s {action}", at.as_secs_f64()));
            }
        }
    }
    (cluster, log)
}

/// Panics on the current thread (where a current-thread runtime also runs
/// every spawned task, e.g. the redis client's connection drivers and the
/// watchdog) since [`PanicProbe::start`]: tokio catches a panic in a spawned
/// task, so a test would not fail on its own.
#[derive(Debug)]
pub struct PanicProbe {
    thread: String,
    from: usize,
}

static PANICS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

impl PanicProbe {
    pub fn start() -> PanicProbe {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let thread = std::thread::current().name().unwrap_or("<unnamed>").to_string();
                if let Ok(mut panics) = PANICS.lock() {
                    panics.push((thread, info.to_string()));
                }
                default(info);
            }));
        });
        PanicProbe {
            thread: current_thread_name(),
            from: PANICS.lock().map_or(0, |p| p.len()),
        }
    }

    /// The messages of the panics on this probe's thread since it started.
    pub fn panics(&self) -> Vec<String> {
        let panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
        panics[self.from..]
            .iter()
            .filter(|(thread, _)| *thread == self.thread)
            .map(|(_, message)| message.clone())
            .collect()
    }
}

fn current_thread_name() -> String {
    std::thread::current().name().unwrap_or("<unnamed>").to_string()
}
