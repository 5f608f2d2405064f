//! One round of one contender: timed lock+unlock cycles, one at a time,
//! bounded in count and in wall-clock time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::contender::{self, Contender};
use crate::stats;

/// How many cycles a round runs and for how long at most.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Untimed cycles first.
    pub warmup: usize,
    /// Timed cycles.
    pub cycles: usize,
    /// Wall-clock cap for the whole round: a contender that hangs or waits
    /// out long timeouts is cut off here.
    pub cap: Duration,
}

/// What a round measured.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// Durations of the timed cycles that completed.
    pub samples: Vec<Duration>,
    /// Cycles that returned an error.
    pub errors: usize,
    /// The first error, for the report.
    pub first_error: Option<String>,
    /// The round hit its wall-clock cap before finishing its cycles.
    pub capped: bool,
    /// Wall-clock time of the round.
    pub elapsed: Duration,
}

impl Round {
    pub fn p50(&self) -> Option<f64> {
        stats::quantile_us(&self.samples, 0.5)
    }

    pub fn p99(&self) -> Option<f64> {
        stats::quantile_us(&self.samples, 0.99)
    }

    fn record(&mut self, timed: bool, outcome: Result<Duration, String>) {
        match outcome {
            Ok(took) if timed => self.samples.push(took),
            Ok(_) => {}
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

/// Runs one round of `contender` on fresh keys named `prefix:i`.
pub async fn run(contender: &Contender, prefix: &str, budget: Budget) -> Round {
    let started = Instant::now();
    let end = started + budget.cap;
    let mut round = Round::default();
    let total = budget.warmup + budget.cycles;
    if let Contender::Redlock(rl) = contender {
        // A thread of its own: redlock blocks, and may block forever.
        let (sender, mut outcomes) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (rl, prefix, thread_stop) = (rl.clone(), prefix.to_owned(), Arc::clone(&stop));
        std::thread::spawn(move || {
            for i in 0..total {
                if thread_stop.load(Ordering::Relaxed) {
                    return;
                }
                let cycle_start = std::time::Instant::now();
                let outcome = contender::blocking_cycle(&rl, &format!("{prefix}:{i}"));
                if sender.send(outcome.map(|()| cycle_start.elapsed())).is_err() {
                    return;
                }
            }
        });
        for i in 0..total {
            match tokio::time::timeout_at(end, outcomes.recv()).await {
                Ok(Some(outcome)) => round.record(i >= budget.warmup, outcome),
                Ok(None) => break,
                Err(_) => {
                    round.capped = true;
                    break;
                }
            }
        }
        // A thread stuck in a hung cycle stops after it (the proxies cut
        // its connection when they are dropped).
        stop.store(true, Ordering::Relaxed);
    } else {
        for i in 0..total {
            let key = format!("{prefix}:{i}");
            let cycle_start = Instant::now();
            match tokio::time::timeout_at(end, contender.cycle(&key)).await {
                Ok(outcome) => round.record(i >= budget.warmup, outcome.map(|()| cycle_start.elapsed())),
                Err(_) => {
                    round.capped = true;
                    break;
                }
            }
        }
    }
    round.elapsed = started.elapsed();
    round
}

/// One contender of an alternating series, with its own budget.
pub struct Entry<'a> {
    /// Unique within the series; also the key prefix.
    pub name: String,
    pub contender: &'a Contender,
    pub budget: Budget,
}

/// Runs `rounds` rounds of every entry, alternating: round `r` runs every
/// entry once, starting with a different one each round, so that slow
/// phases of a shared machine hit all entries alike. An entry that hit its
/// wall-clock cap is not run again (its later rounds stay empty and capped).
/// Returns the rounds per entry, in the order of `entries`.
pub async fn alternate(entries: &[Entry<'_>], rounds: usize) -> Vec<Vec<Round>> {
    let mut results: Vec<Vec<Round>> = entries.iter().map(|_| Vec::with_capacity(rounds)).collect();
    for r in 0..rounds {
        for j in 0..entries.len() {
            let i = (j + r) % entries.len();
            let entry = &entries[i];
            let gave_up = results[i].iter().any(|round| round.capped);
            let round = if gave_up {
                Round {
                    capped: true,
                    ..Round::default()
                }
            } else {
                run(entry.contender, &format!("{}:{r}", entry.name), entry.budget).await
            };
            results[i].push(round);
        }
    }
    results
}

/// Per-round p50s (µs), `None` for rounds without samples.
pub fn p50s(rounds: &[Round]) -> Vec<Option<f64>> {
    rounds.iter().map(Round::p50).collect()
}

/// Per-round p99s (µs).
pub fn p99s(rounds: &[Round]) -> Vec<Option<f64>> {
    rounds.iter().map(Round::p99).collect()
}

/// The rounds of one contender in one setting, as reported.
#[derive(Debug)]
pub struct Series {
    pub kind: crate::contender::Kind,
    /// Nodes.
    pub n: usize,
    pub rounds: Vec<Round>,
    /// The wall-clock cap its rounds had.
    pub cap: Duration,
}

impl Series {
    /// Median over rounds of the per-round p50 (µs).
    pub fn p50(&self) -> Option<f64> {
        stats::median(p50s(&self.rounds).into_iter().flatten())
    }

    /// Median over rounds of the per-round p99 (µs).
    pub fn p99(&self) -> Option<f64> {
        stats::median(p99s(&self.rounds).into_iter().flatten())
    }

    /// Whether some round hit the wall-clock cap.
    pub fn capped(&self) -> bool {
        self.rounds.iter().any(|r| r.capped)
    }

    /// Timed cycles completed over all rounds.
    pub fn cycles(&self) -> usize {
        self.rounds.iter().map(|r| r.samples.len()).sum()
    }

    /// Cycles that failed over all rounds.
    pub fn errors(&self) -> usize {
        self.rounds.iter().map(|r| r.errors).sum()
    }

    /// A table cell for `value` (e.g. the p50) that says plainly when the
    /// contender hung or was cut off.
    pub fn cell(&self, value: Option<f64>) -> String {
        let cap = format!("{:.0} s", self.cap.as_secs_f64());
        match (self.cycles(), self.capped()) {
            (0, true) => format!("hangs (no cycle done in {cap})"),
            (k, true) => format!("{} ({k} cycles, then cut off at {cap})", stats::fmt_us(value)),
            (0, false) if self.errors() > 0 => format!("fails ({} errors)", self.errors()),
            _ => stats::fmt_us(value),
        }
    }
}
