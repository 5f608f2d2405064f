//! (b) many tasks, each on keys of its own, cycling lock+unlock for a
//! window: cycles per second, at N = 1, 3, 5, and quorumlock on etcd and
//! ZooKeeper with 64 tasks in the N=5 rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::consensus::{self, Store};
use crate::contender::{self, Contender, Kind};
use crate::cpu;
use crate::nodes::Nodes;
use crate::stats;

/// Node counts measured.
pub const NS: [usize; 3] = [1, 3, 5];

/// Contenders with 64 tasks; redlock gets 64 threads (it blocks).
pub const KINDS_64: [Kind; 4] = [Kind::Raw, Kind::Ours, Kind::Rslock, Kind::Redlock];

/// Contenders also measured with 256 tasks: more requests in flight at once,
/// for batching to share.
pub const KINDS_256: [Kind; 3] = [Kind::Raw, Kind::Ours, Kind::Rslock];

/// How long a counted window that has seen no completed cycle is extended,
/// at most: a store whose single cycle outlasts a short window (a
/// ZooKeeper ensemble's synced writes, 64 tasks at once on a loaded
/// machine, in the smoke run's 200 ms) then reports its slow rate instead
/// of 0; a store that completes nothing in this long reports 0.
const NO_CYCLE_YET_CAP: Duration = Duration::from_secs(10);

/// How often an extended window looks for its first completed cycle.
const NO_CYCLE_YET_POLL: Duration = Duration::from_millis(20);

/// Length of a round.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Cycles before this are not counted (connections, caches).
    pub warm: Duration,
    /// Counted time (extended while no cycle has completed in it, up to
    /// `NO_CYCLE_YET_CAP`).
    pub window: Duration,
}

impl Window {
    /// Waits out the counted time that began at `start` with `before`
    /// completions in `done`, extended while none has completed since.
    pub async fn count(&self, start: Instant, done: &AtomicU64, before: u64) {
        tokio::time::sleep_until(start + self.window).await;
        while done.load(Ordering::Relaxed) == before && start.elapsed() < self.window + NO_CYCLE_YET_CAP {
            tokio::time::sleep(NO_CYCLE_YET_POLL).await;
        }
    }
}

/// One contender's rounds at one N and task count.
#[derive(Debug)]
pub struct Rate {
    pub kind: Kind,
    pub n: usize,
    pub tasks: usize,
    /// Cycles per second, per round.
    pub rounds: Vec<f64>,
    /// CPU time per cycle (µs) of this process and of the nodes, per round.
    pub client_us: Vec<f64>,
    pub server_us: Vec<f64>,
    /// Failed cycles over all rounds.
    pub errors: u64,
    /// The first failure, for the report.
    pub first_error: Option<String>,
}

impl Rate {
    /// Median over rounds.
    pub fn median(&self) -> Option<f64> {
        stats::median(self.rounds.iter().copied())
    }
}

/// Every contender at every N, and the contenders of the consensus
/// `stores` in the rounds of N = [`consensus::BESIDE`]; quorumlock's Redis
/// clients with `node_timeout`.
pub async fn run(
    nodes: &Nodes,
    rounds: usize,
    window: Window,
    node_timeout: Duration,
    stores: &[Store],
) -> Vec<Rate> {
    let mut rates = Vec::new();
    for n in NS {
        let urls = nodes.direct(n);
        let mut entries = Vec::new();
        for (tasks, kinds) in [(64, &KINDS_64[..]), (256, &KINDS_256[..])] {
            for &kind in kinds {
                let contender = Arc::new(Contender::connect_with(kind, &urls, node_timeout).await);
                entries.push((kind, tasks, contender));
            }
        }
        for store in stores.iter().filter(|_| n == consensus::BESIDE) {
            let contender = Arc::new(store.contender().await);
            entries.push((store.kind(), consensus::TASKS, contender));
        }
        // The store whose processes' CPU time a round counts.
        let store_cpu = |kind: Kind| match stores.iter().find(|s| s.kind() == kind) {
            Some(store) => store.cpu(),
            None => nodes.cpu(n),
        };
        let mut results: Vec<Rate> = entries
            .iter()
            .map(|(kind, tasks, _)| Rate {
                kind: *kind,
                n: if consensus::is_store(*kind) {
                    consensus::MEMBERS
                } else {
                    n
                },
                tasks: *tasks,
                rounds: Vec::new(),
                client_us: Vec::new(),
                server_us: Vec::new(),
                errors: 0,
                first_error: None,
            })
            .collect();
        for r in 0..rounds {
            for j in 0..entries.len() {
                let i = (j + r) % entries.len();
                let (kind, tasks, contender) = &entries[i];
                let prefix = format!("b:{n}:{kind:?}:{tasks}:{r}");
                let store = || store_cpu(*kind);
                let outcome = round(&store, contender, *tasks, &prefix, window).await;
                let result = &mut results[i];
                result.rounds.push(outcome.rate);
                result.client_us.push(outcome.client_us);
                result.server_us.push(outcome.server_us);
                result.errors += outcome.errors;
                if result.first_error.is_none() {
                    result.first_error = outcome.first_error;
                }
            }
        }
        rates.extend(results);
        nodes.flush();
        eprintln!("  (b) N={n} done");
    }
    rates
}

/// What one round measured.
pub struct Outcome {
    /// Cycles per second over the counted window.
    pub rate: f64,
    /// CPU time per cycle over the window (µs): this process (the client),
    /// and the store's processes (nodes, or the members of a consensus store).
    pub client_us: f64,
    pub server_us: f64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One round: `tasks` loops until the window ends; `store_cpu` reads the
/// CPU time of the store's processes so far.
pub async fn round(
    store_cpu: &dyn Fn() -> Duration,
    contender: &Arc<Contender>,
    tasks: usize,
    prefix: &str,
    window: Window,
) -> Outcome {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
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
    let (client_before, server_before) = (cpu::this_process(), store_cpu());
    window.count(start, &done, before).await;
    let (elapsed, after) = (start.elapsed(), done.load(Ordering::Relaxed));
    let (client, server) = (cpu::this_process() - client_before, store_cpu() - server_before);
    stop.store(true, Ordering::Relaxed);
    for task in spawned {
        task.await.expect("throughput task");
    }
    if !threads.is_empty() {
        tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| t.join().expect("thread")))
            .await
            .expect("join");
    }
    // The CPU figures are per cycle: a window without one has none to give
    // (its rate, 0, still reports what happened).
    let cycles = after - before;
    let per_cycle = |spent: Duration| {
        if cycles == 0 {
            f64::NAN
        } else {
            spent.as_secs_f64() * 1e6 / cycles as f64
        }
    };
    Outcome {
        rate: (after - before) as f64 / elapsed.as_secs_f64(),
        client_us: per_cycle(client),
        server_us: per_cycle(server),
        errors: errors.count.load(Ordering::Relaxed),
        first_error: errors.first.lock().unwrap().take(),
    }
}

#[derive(Default)]
struct Errors {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

fn count(outcome: Result<(), String>, done: &AtomicU64, errors: &Errors) {
    match outcome {
        Ok(()) => {
            done.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            errors.count.fetch_add(1, Ordering::Relaxed);
            errors.first.lock().unwrap().get_or_insert(e);
        }
    }
}
