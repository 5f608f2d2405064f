//! The mutual-exclusion checker of the chaos suite.
//!
//! `C` contenders (tasks, each with its own [`Redlock`] client, hence its own
//! connections and watchdog, as separate processes would have) contend for
//! one resource while a [`Schedule`] of faults runs against a [`Target`]
//! (a [`Cluster`](crate::faults::Cluster) of Redis nodes, or an etcd cluster).
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
//!
//! [`Guard::is_held`]: quorumlock::Guard::is_held
//! [`Guard::lost`]: quorumlock::Guard::lost

mod contender;
mod report;
mod schedule;

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::Redlock;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::contender::{Stats, contend};
pub use self::report::{Holding, Report, overlaps};
use self::report::{closest_handover, describe_overlaps};
use self::schedule::{FaultLog, run_schedule};
use crate::faults::{Schedule, Target};
use crate::panics::PanicProbe;

/// Environment variable that fixes the seed of every scenario.
pub const SEED_VAR: &str = "QUORUMLOCK_CHAOS_SEED";

/// Environment variable that turns on the long (soak) schedules: `1`.
pub const SOAK_VAR: &str = "QUORUMLOCK_CHAOS_SOAK";

/// How late a holder may see a loss after its `valid_until` in a safe
/// scenario: scheduling slack on a loaded 2-core CI machine. A loss signal
/// that does not fire shows up as the rest of the hold (hundreds of ms).
pub const SIGNAL_TOLERANCE: Duration = Duration::from_millis(250);

/// Contenders per scenario in CI, unless a scenario sets its own: a holder
/// and two clients racing for its release, enough for split votes and
/// hand-offs while the file stays near half a minute on 2 cores.
pub const CI_CONTENDERS: usize = 3;

/// Contenders per scenario in the soak, unless a scenario sets its own: more
/// clients racing for every release than in CI, so that more attempts meet
/// each fault and more of them split the nodes between them.
pub const SOAK_CONTENDERS: usize = 6;

/// Hold times in CI, unless a scenario sets its own: several steps of work
/// each, so that a fault often lands inside a critical section.
pub const CI_HOLD: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(300));

/// Hold times in the soak, unless a scenario sets its own: one holder at a
/// time makes at most one acquisition per hold, so short holds make many
/// acquisitions per second of fault (the CI holds make a few), while each
/// is still at least three steps ([`SOAK_STEP`]) long, so a holder checks its
/// lock inside.
pub const SOAK_HOLD: (Duration, Duration) = (Duration::from_millis(3), Duration::from_millis(20));

/// A holder's step in CI: a few `is_held` checks per hold without making
/// the holders the busiest tasks of the run.
pub const CI_STEP: Duration = Duration::from_millis(20);

/// A holder's step in the soak: a third of the shortest [`SOAK_HOLD`], and
/// the resolution of tokio's timer, so no finer step would be kept.
pub const SOAK_STEP: Duration = Duration::from_millis(1);

/// Pause between attempts in CI, unless a scenario sets its own: often
/// enough that a release is soon taken up, rarely enough that refused
/// attempts do not crowd out the holder on a 2-core machine.
pub const CI_RETRY: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(40));

/// Pause between attempts in the soak, unless a scenario sets its own:
/// shorter on average than a [`SOAK_HOLD`], so that with [`SOAK_CONTENDERS`]
/// retrying a release is taken up within a millisecond or two and the short
/// holds turn into many acquisitions; at least a millisecond, so that the
/// refused clients do not spin and starve the holder of CPU.
pub const SOAK_RETRY: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(10));

/// Whether the long schedules are asked for (`QUORUMLOCK_CHAOS_SOAK=1`).
pub fn soak() -> bool {
    std::env::var(SOAK_VAR).is_ok_and(|v| v == "1")
}

/// `ci` normally, `soak_value` under `QUORUMLOCK_CHAOS_SOAK=1`: a cycle
/// count, a duration or any other setting of a schedule.
pub fn ci_or_soak<T>(ci: T, soak_value: T) -> T {
    if soak() { soak_value } else { ci }
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

/// The resource the contenders contend for: a schedule that acts on the
/// lock's key ([`Action::Occupy`]) names it.
///
/// [`Action::Occupy`]: crate::faults::Action::Occupy
pub const RESOURCE: &str = "chaos:resource";

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
    /// Take fenced locks (on Redis; etcd and ZooKeeper locks always are).
    fenced: bool,
    /// Hold time per acquisition, drawn from `[min, max]`.
    hold: (Duration, Duration),
    step: Duration,
    /// Pause after each attempt (and after each hold), drawn from `[min, max]`.
    retry: (Duration, Duration),
    max_rounds: Option<usize>,
    /// How long each contender uses its client on a resource of its own
    /// before it contends.
    warm_up: Duration,
}

impl Checker {
    /// A scenario named `scenario`; prints its seed. Defaults: ttl 1 s,
    /// per-node timeout 150 ms, auto-renewal, 500 ms of running after the
    /// last fault, and [`CI_CONTENDERS`] contenders holding for [`CI_HOLD`]
    /// in [`CI_STEP`] steps with [`CI_RETRY`] between attempts; in the soak,
    /// [`SOAK_CONTENDERS`], [`SOAK_HOLD`], [`SOAK_STEP`] and [`SOAK_RETRY`].
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
                contenders: ci_or_soak(CI_CONTENDERS, SOAK_CONTENDERS),
                resource: RESOURCE.to_string(),
                ttl: Duration::from_secs(1),
                node_timeout: Duration::from_millis(150),
                renewal: Renewal::Auto,
                api: Api::TryLock,
                drift: None,
                fenced: false,
                hold: ci_or_soak(CI_HOLD, SOAK_HOLD),
                step: ci_or_soak(CI_STEP, SOAK_STEP),
                retry: ci_or_soak(CI_RETRY, SOAK_RETRY),
                max_rounds: None,
                warm_up: Duration::ZERO,
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

    /// The seed this scenario's random choices come from (printed by
    /// [`Checker::new`]).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// How many contenders take part, each with a client of its own.
    pub fn contenders(mut self, n: usize) -> Checker {
        self.plan.contenders = n;
        self
    }

    /// The ttl of every lock the contenders take.
    pub fn ttl(mut self, ttl: Duration) -> Checker {
        self.plan.ttl = ttl;
        self
    }

    /// The contenders' per-node timeout.
    pub fn node_timeout(mut self, timeout: Duration) -> Checker {
        self.plan.node_timeout = timeout;
        self
    }

    /// Which contenders let the watchdog renew their lock.
    pub fn renewal(mut self, renewal: Renewal) -> Checker {
        self.plan.renewal = renewal;
        self
    }

    /// How the contenders take the lock.
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

    /// Whether the contenders take fenced locks (a fencing token with every
    /// grant, in the report's history).
    pub fn fenced(mut self, on: bool) -> Checker {
        self.plan.fenced = on;
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

    /// Each contender first takes and releases a lock of its own for this
    /// long (none by default), so that it contends with a client in use:
    /// connected, and with every node's clock read (clock rates are
    /// measured from readings taken while a client takes locks). A schedule
    /// that needs clients in use waits as long before its faults.
    pub fn warm_up(mut self, warm_up: Duration) -> Checker {
        self.plan.warm_up = warm_up;
        self
    }

    /// Runs the contenders against `cluster` while `schedule` runs, then
    /// [`Checker::tail`] longer; prints and returns the report and gives the
    /// cluster back (faults still in force, for the test to inspect).
    pub async fn run<T: Target>(mut self, cluster: T, schedule: Schedule<T::Action>) -> (Report, T) {
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
        let tasks: Vec<_> = (0..plan.contenders)
            .map(|id| {
                let (redlock, with_lock) = plan.client(id, &urls);
                let rng = StdRng::seed_from_u64(self.rng.random());
                let (plan, shared) = (Arc::clone(&plan), Arc::clone(&shared));
                tokio::spawn(contend(id, redlock, with_lock, plan, shared, rng))
            })
            .collect();
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
        let history = std::mem::take(&mut *shared.history.lock().unwrap());
        let report = self.report(history, stats, log, &probe, started);
        report.print();
        (report, cluster)
    }

    /// The report of a run: `history` (in the order the holdings ended),
    /// the contenders' `stats`, the schedule's `log` and the panics seen.
    fn report(
        self,
        mut history: Vec<Holding>,
        stats: Stats,
        log: FaultLog,
        probe: &PanicProbe,
        started: Instant,
    ) -> Report {
        history.sort_by_key(|h| h.enter);
        let pairs = overlaps(&history);
        let overlap_examples = describe_overlaps(&history, &pairs, started);
        Report {
            scenario: self.scenario,
            seed: self.seed,
            contenders: self.plan.contenders,
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
        }
    }
}

impl Plan {
    /// Contender `id`'s own client (its own connections and watchdog, as a
    /// separate process would have), and whether it takes the lock with
    /// `with_lock`.
    fn client(&self, id: usize, urls: &[String]) -> (Redlock, bool) {
        let renew = match self.renewal {
            Renewal::Auto => true,
            Renewal::Off => false,
            Renewal::Mixed => id.is_multiple_of(2),
        };
        let with_lock = match self.api {
            Api::TryLock => false,
            Api::WithLock => true,
            Api::Mixed => id % 3 == 2,
        };
        // `with_lock` waits with the library's retry: keep its attempts
        // about as frequent as the others', and its waits short.
        let mut builder = Redlock::builder()
            .nodes(urls.iter().cloned())
            .node_timeout(self.node_timeout)
            .auto_renew(renew)
            .retry_delay((self.retry.0 + self.retry.1).max(Duration::from_millis(2)))
            .wait(self.ttl / 2);
        if let Some((factor, fixed)) = self.drift {
            builder = builder.drift(factor, fixed);
        }
        if self.fenced {
            builder = builder.options(quorumlock::LockOptions::new().fenced(true));
        }
        (builder.build().expect("valid chaos client"), with_lock)
    }
}

/// State shared by the contenders and the schedule.
#[derive(Debug)]
struct Shared {
    /// Locks granted so far, for the schedule's `await_acquisition`.
    acquisitions: AtomicU64,
    /// A fault is in force (updated by the schedule after every action).
    degraded: AtomicBool,
    /// Every holding recorded so far, in the order they ended.
    history: Mutex<Vec<Holding>>,
    /// Tells the contenders to stop after their current attempt.
    stop: CancellationToken,
}
