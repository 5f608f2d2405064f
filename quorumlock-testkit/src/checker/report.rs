//! What a scenario run saw: the [`Holding`]s its contenders recorded, the
//! [`overlaps`] among them, and the [`Report`] that sums them up and states
//! the properties a test asserts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

use super::SIGNAL_TOLERANCE;

/// One critical section, as its holder recorded it.
#[derive(Clone, Debug)]
pub struct Holding {
    /// Which contender held the lock (its index, from 0).
    pub contender: usize,
    /// When the lock was granted.
    pub enter: Instant,
    /// When the holder stopped working: its hold was done, or it saw the loss.
    pub stop: Instant,
    /// The guard's `valid_until` when the holder stopped.
    pub valid_until: Instant,
    /// The holder saw the loss (`is_held` false or `lost()`) before its hold
    /// was done.
    pub lost: bool,
    /// A fault was in force when the lock was granted.
    pub degraded: bool,
    /// The guard's fencing token, when it has one.
    pub fence: Option<u64>,
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
pub(super) fn closest_handover(history: &[Holding]) -> Option<f64> {
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

/// The first few of `pairs` (indexes into `history`), described with times
/// in seconds since `started`, for the report and a failing assertion.
pub(super) fn describe_overlaps(
    history: &[Holding],
    pairs: &[(usize, usize)],
    started: Instant,
) -> Vec<String> {
    let at = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
    pairs
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
        .collect()
}

/// What a scenario run saw.
#[derive(Debug)]
pub struct Report {
    /// The scenario's name, as given to [`Checker::new`].
    ///
    /// [`Checker::new`]: super::Checker::new
    pub scenario: String,
    /// The seed of the run's random choices.
    pub seed: u64,
    /// How many contenders took part.
    pub contenders: usize,
    /// Lock attempts, over all contenders.
    pub rounds: usize,
    /// Locks granted, over all contenders.
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
    /// How long the run took, schedule and tail included.
    pub elapsed: Duration,
    /// Every holding, sorted by `enter`.
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
