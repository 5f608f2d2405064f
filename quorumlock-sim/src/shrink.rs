//! Shrinking a failing run to a smaller one that fails the same way: the
//! workload cut short, and the faults that the failure does not need left
//! out (each fault is drawn all the same, so that the others stay as they
//! were). What is left is the trace to read: a few faults, with their
//! times, and a replay command for the small run.

use std::mem::{Discriminant, discriminant};
use std::time::Duration;

use crate::violation::Violation;
use crate::{Outcome, Scenario, run};

/// The run lengths tried, shortest first, below the scenario's own.
const LENGTHS_S: [u64; 8] = [1, 2, 3, 5, 8, 13, 21, 34];

/// How many times the faults are gone through: leaving one out can make
/// another unneeded.
const FAULT_PASSES: usize = 2;

/// A failing run made smaller.
pub struct Shrunk {
    /// The smaller run's settings: its duration and the faults kept.
    pub scenario: Scenario,
    pub outcome: Outcome,
    /// Runs the shrinking took.
    pub runs: usize,
}

/// Shrinks the run of `seed` under `scenario`, which failed with `failed`:
/// the smallest run found that breaks a property `failed` broke.
pub fn shrink(seed: u64, scenario: &Scenario, failed: &Outcome) -> Shrunk {
    let kinds: Vec<Discriminant<Violation>> = failed.violations.iter().map(discriminant).collect();
    let mut best = Shrunk {
        scenario: scenario.clone(),
        outcome: failed.clone(),
        runs: 0,
    };
    let attempt = |best: &mut Shrunk, candidate: Scenario| {
        best.runs += 1;
        let outcome = run(seed, &candidate);
        let same = outcome
            .violations
            .iter()
            .any(|v| kinds.contains(&discriminant(v)));
        if same {
            best.scenario = candidate;
            best.outcome = outcome;
        }
        same
    };
    for seconds in LENGTHS_S {
        let duration = Duration::from_secs(seconds);
        if duration >= best.scenario.duration {
            break;
        }
        let shorter = Scenario {
            duration,
            ..best.scenario.clone()
        };
        if attempt(&mut best, shorter) {
            break;
        }
    }
    for _ in 0..FAULT_PASSES {
        let mut changed = false;
        let before: Vec<usize> = drawn(&best.outcome).collect();
        for index in before {
            if !drawn(&best.outcome).any(|i| i == index) {
                continue;
            }
            let kept: Vec<usize> = drawn(&best.outcome).filter(|&i| i != index).collect();
            let fewer = Scenario {
                kept_faults: Some(kept),
                ..best.scenario.clone()
            };
            changed |= attempt(&mut best, fewer);
        }
        if !changed {
            break;
        }
    }
    best
}

/// The faults a run injected, by the order drawn.
fn drawn(outcome: &Outcome) -> impl Iterator<Item = usize> + '_ {
    outcome.faults.iter().filter_map(|fault| fault.drawn)
}
