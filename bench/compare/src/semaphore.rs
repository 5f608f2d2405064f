//! (h) a pool of K = 10 permits over 3 nodes: quorumlock's `Semaphore`
//! (acquire, woken by releases) against the sweep the API-key example used
//! before it (`try_lock` over the 10 keys in random order, a 5-25 ms
//! back-off when all are busy). Each task takes a permit, holds it for the
//! hold time and releases it, in a loop; three clients share the tasks, as
//! the example's three "processes" do.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Guard, Permit, Redlock};
use tokio::time::Instant;

use crate::nodes::Nodes;
use crate::stats;
use crate::throughput::Window;

/// Permits in the pool, as in the example.
pub const PERMITS: usize = 10;

/// Nodes of the scenario.
pub const NODES: usize = 3;

/// Clients the tasks are spread over.
const CLIENTS: usize = 3;

/// Task counts measured: three and six times the permits.
pub const TASKS: [usize; 2] = [32, 64];

/// Hold times measured: none (the cost of the pool itself) and 20 ms (the
/// short end of the API-key example's requests, 20-50 ms).
pub const HOLDS_MS: [u64; 2] = [0, 20];

/// Lock ttl of a permit.
const TTL: Duration = Duration::from_secs(10);

/// How a task takes a permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Semaphore,
    Sweep,
}

impl Way {
    pub const ALL: [Way; 2] = [Way::Semaphore, Way::Sweep];

    pub fn label(self) -> &'static str {
        match self {
            Way::Semaphore => "quorumlock Semaphore::acquire",
            Way::Sweep => "try_lock sweep + 5-25 ms back-off",
        }
    }
}

/// One way's rounds at one task count and hold.
#[derive(Debug)]
pub struct Pool {
    pub way: Way,
    pub tasks: usize,
    pub hold_ms: u64,
    /// Acquisitions per second, per round.
    pub rounds: Vec<f64>,
    /// Node commands (those inside scripts included) per acquisition, per round.
    pub commands: Vec<f64>,
    /// p99 and longest time a task waited for a permit (ms), per round:
    /// how evenly the permits went round.
    pub wait_p99_ms: Vec<f64>,
    pub wait_max_ms: Vec<f64>,
    pub errors: u64,
}

/// Every way at every task count and hold, `rounds` times, alternating.
pub async fn run(nodes: &Nodes, rounds: usize, window: Window, node_timeout: Duration) -> Vec<Pool> {
    let urls = nodes.direct(NODES);
    let mut pools = Vec::new();
    for tasks in TASKS {
        for hold_ms in HOLDS_MS {
            for way in Way::ALL {
                pools.push(Pool {
                    way,
                    tasks,
                    hold_ms,
                    rounds: Vec::new(),
                    commands: Vec::new(),
                    wait_p99_ms: Vec::new(),
                    wait_max_ms: Vec::new(),
                    errors: 0,
                });
            }
        }
    }
    for round_no in 0..rounds {
        for pool in &mut pools {
            let name = format!("pool-{round_no}-{}-{}-{:?}", pool.tasks, pool.hold_ms, pool.way);
            let before: u64 = nodes.command_calls(NODES).values().sum();
            let (rate, acquisitions, errors, waits) = round(&urls, pool, &name, window, node_timeout).await;
            let after: u64 = nodes.command_calls(NODES).values().sum();
            pool.rounds.push(rate);
            pool.commands
                .push((after - before) as f64 / acquisitions.max(1) as f64);
            pool.errors += errors;
            let ms = |us: Option<f64>| us.map_or(f64::NAN, |us| us / 1000.0);
            pool.wait_p99_ms.push(ms(stats::quantile_us(&waits, 0.99)));
            pool.wait_max_ms.push(ms(stats::quantile_us(&waits, 1.0)));
            eprintln!(
                "  (h) {} x{} hold {} ms: {rate:.0} acquisitions/s",
                pool.way.label(),
                pool.tasks,
                pool.hold_ms
            );
        }
        nodes.flush();
    }
    pools
}

/// A client of the pool on `urls`.
fn client(urls: &[String], node_timeout: Duration) -> Redlock {
    Redlock::builder()
        .nodes(urls.to_vec())
        .node_timeout(node_timeout)
        .build()
        .expect("client")
}

/// One round, its clients with `node_timeout`: acquisitions per second
/// over the window, acquisitions in all (for the command count, which spans
/// the whole round), errors, and the waits for a permit in the window.
async fn round(
    urls: &[String],
    pool: &Pool,
    name: &str,
    window: Window,
    node_timeout: Duration,
) -> (f64, u64, u64, Vec<Duration>) {
    let clients: Vec<Redlock> = (0..CLIENTS).map(|_| client(urls, node_timeout)).collect();
    let keys: Arc<[String]> = (0..PERMITS).map(|i| format!("{name}:key:{i}")).collect();
    let (done, errors, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let hold = Duration::from_millis(pool.hold_ms);
    let waits = Arc::new(Mutex::new(Vec::new()));
    let counting = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..pool.tasks {
        let redlock = clients[t % CLIENTS].clone();
        let semaphore = redlock.semaphore(name, PERMITS).expect("semaphore");
        let (keys, done, errors, stop, way) = (
            Arc::clone(&keys),
            Arc::clone(&done),
            Arc::clone(&errors),
            Arc::clone(&stop),
            pool.way,
        );
        let (waits, counting) = (Arc::clone(&waits), Arc::clone(&counting));
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let taken = match way {
                    Way::Semaphore => semaphore.acquire(TTL).await.map(Taken::Permit),
                    Way::Sweep => sweep(&redlock, &keys).await.map(Taken::Guard),
                };
                let Ok(taken) = taken else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if counting.load(Ordering::Relaxed) {
                    waits.lock().unwrap().push(asked.elapsed());
                }
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                let released = match taken {
                    Taken::Permit(permit) => permit.release().await,
                    Taken::Guard(guard) => guard.release().await,
                };
                match released {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(window.warm).await;
    counting.store(true, Ordering::Relaxed);
    let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
    window.count(start, &done, before).await;
    let (elapsed, after) = (start.elapsed(), done.load(Ordering::Relaxed));
    counting.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("pool task");
    }
    let rate = (after - before) as f64 / elapsed.as_secs_f64();
    let waits = std::mem::take(&mut *waits.lock().unwrap());
    (
        rate,
        done.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        waits,
    )
}

/// What a task holds.
enum Taken {
    Permit(Permit),
    Guard(Guard),
}

/// The API-key example's former loop: `try_lock` over the keys once each in
/// random order; when all are busy, a 5-25 ms back-off and again.
async fn sweep(redlock: &Redlock, keys: &[String]) -> Result<Guard, quorumlock::Error> {
    loop {
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by_cached_key(|_| rand::random::<u32>());
        for i in order {
            if let Some(guard) = redlock.try_lock(keys[i].as_str(), TTL).await? {
                return Ok(guard);
            }
        }
        let backoff = 5 + rand::random::<u64>() % 20;
        tokio::time::sleep(Duration::from_millis(backoff)).await;
    }
}
