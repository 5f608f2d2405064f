//! The table of (h): semaphore acquisitions per second at K = 10 against
//! the try_lock sweep, with their ratio within each round.

use std::fmt::Write;

use crate::Settings;
use crate::semaphore::{HOLDS_MS, NODES, PERMITS, Pool, TASKS, Way};
use crate::stats::{fmt_ratio, median};

fn find(pools: &[Pool], way: Way, tasks: usize, hold_ms: u64) -> Option<&Pool> {
    pools
        .iter()
        .find(|p| p.way == way && p.tasks == tasks && p.hold_ms == hold_ms)
}

pub fn table(md: &mut String, pools: &[Pool], s: &Settings) {
    let _ = writeln!(
        md,
        "### (h) A pool of K = {PERMITS} permits over {NODES} nodes: `Semaphore` against a `try_lock` sweep, {:.1} s windows\n",
        s.window.window.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "Each task takes a permit, holds it for the hold time and releases it, in a loop; the tasks \
         share three clients. The sweep is the API-key example's former loop: `try_lock` over the \
         {PERMITS} keys in random order, a 5-25 ms back-off when all are busy. Medians over rounds; \
         the ratio is the median of the ratios within rounds; node commands per acquisition count \
         those run inside scripts; a wait is from asking for a permit to holding one.\n"
    );
    let _ = writeln!(
        md,
        "| tasks | hold | Semaphore acquisitions/s | sweep acquisitions/s | Semaphore / sweep \
         | node commands per acquisition, Semaphore | same, sweep | wait p99 / max (ms), Semaphore \
         | same, sweep | errors (Semaphore / sweep) |"
    );
    let _ = writeln!(md, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for tasks in TASKS {
        for hold_ms in HOLDS_MS {
            let (Some(sem), Some(sweep)) = (
                find(pools, Way::Semaphore, tasks, hold_ms),
                find(pools, Way::Sweep, tasks, hold_ms),
            ) else {
                continue;
            };
            let ratio = median(sem.rounds.iter().zip(&sweep.rounds).map(|(a, b)| a / b));
            let fmt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
            let med = |values: &[f64]| median(values.iter().copied().filter(|v| v.is_finite()));
            let _ = writeln!(
                md,
                "| {tasks} | {hold_ms} ms | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} / {} |",
                fmt(med(&sem.rounds), 0),
                fmt(med(&sweep.rounds), 0),
                fmt_ratio(ratio),
                fmt(med(&sem.commands), 1),
                fmt(med(&sweep.commands), 1),
                fmt(med(&sem.wait_p99_ms), 1),
                fmt(med(&sem.wait_max_ms), 0),
                fmt(med(&sweep.wait_p99_ms), 1),
                fmt(med(&sweep.wait_max_ms), 0),
                sem.errors,
                sweep.errors,
            );
        }
    }
    let _ = writeln!(md);
}
