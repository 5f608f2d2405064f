//! (b) many tasks, each on keys of its own, cycling lock+unlock for a
//! window: cycles per second, at N = 1, 3, 5.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::contender::{self, Contender, Kind};
use crate::nodes::Nodes;
use crate::stats;

/// Node counts measured.
pub const NS: [usize; 3] = [1, 3, 5];

/// Contenders with 64 tasks; redlock gets 64 threads (it blocks).
pub const KINDS_64: [Kind; 4] = [Kind::Raw, Kind::Ours, Kind::Rslock, Kind::Redlock];

/// Contenders also measured with 256 tasks (the baseline of issue 10).
pub const KINDS_256: [Kind; 3] = [Kind::Raw, Kind::Ours, Kind::Rslock];

/// Length of a round.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Cycles before this are not counted (connections, caches).
    pub warm: Duration,
    /// Counted time.
    pub window: Duration,
}

/// One contender's rounds at one N and task count.
#[derive(Debug)]
pub struct Rate {
    pub kind: Kind,
    pub n: usize,
    pub tasks: usize,
    /// Cycles per second, per round.
    pub rounds: Vec<f64>,
    /// Failed cycles over all rounds.
    pub errors: u64,
}

impl Rate {
    /// Median over rounds.
    pub fn median(&self) -> Option<f64> {
        stats::median(self.rounds.iter().copied())
    }
}

pub async fn run(nodes: &Nodes, rounds: usize, window: Window) -> Vec<Rate> {
    let mut rates = Vec::new();
    for n in NS {
        let urls = nodes.direct(n);
        let mut entries = Vec::new();
        for (tasks, kinds) in [(64, &KINDS_64[..]), (256, &KINDS_256[..])] {
            for &kind in kinds {
                let contender = Arc::new(Contender::connect(kind, &urls, true).await);
                entries.push((kind, tasks, contender));
            }
        }
        let mut results: Vec<Rate> = entries
            .iter()
            .map(|(kind, tasks, _)| Rate {
                kind: *kind,
                n,
                tasks: *tasks,
                rounds: Vec::new(),
                errors: 0,
            })
            .collect();
        for r in 0..rounds {
            for j in 0..entries.len() {
                let i = (j + r) % entries.len();
                let (kind, tasks, contender) = &entries[i];
                let prefix = format!("b:{n}:{kind:?}:{tasks}:{r}");
                let (rate, errors) = round(contender, *tasks, &prefix, window).await;
                results[i].rounds.push(rate);
                results[i].errors += errors;
            }
        }
        rates.extend(results);
        nodes.flush();
        eprintln!("  (b) N={n} done");
    }
    rates
}

/// One round: `tasks` loops until the window ends; returns cycles per
/// second over the counted window and the number of failed cycles.
async fn round(contender: &Arc<Contender>, tasks: usize, prefix: &str, window: Window) -> (f64, u64) {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut spawned = Vec::new();
    for t in 0..tasks {
        let (done, errors, stop) = (Arc::clone(&done), Arc::clone(&errors), Arc::clone(&stop));
        let prefix = format!("{prefix}:{t}");
        if let Contender::Redlock(rl) = &**contender {
            let rl = rl.clone();
            threads.push(std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    count(
                        contender::blocking_cycle(&rl, &format!("{prefix}:{i}")),
                        &done,
                        &errors,
                    );
                    i += 1;
                }
            }));
        } else {
            let contender = Arc::clone(contender);
            spawned.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    count(contender.cycle(&format!("{prefix}:{i}")).await, &done, &errors);
                    i += 1;
                }
            }));
        }
    }
    tokio::time::sleep(window.warm).await;
    let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::time::sleep(window.window).await;
    let (elapsed, after) = (start.elapsed(), done.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    for task in spawned {
        task.await.expect("throughput task");
    }
    if !threads.is_empty() {
        tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| t.join().expect("thread")))
            .await
            .expect("join");
    }
    let rate = (after - before) as f64 / elapsed.as_secs_f64();
    (rate, errors.load(Ordering::Relaxed))
}

fn count(outcome: Result<(), String>, done: &AtomicU64, errors: &AtomicU64) {
    match outcome {
        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
    };
}
