//! A pool of 10 LLM API keys shared by an agent scheduler's workers.
//!
//! Each key may serve one request at a time (its provider's rate limit).
//! The pool is a [`Semaphore`] of 10 permits: permit `i` is the lock of key
//! `i`, so the permit's index says which key a job may use. A job waits for
//! any free key with `acquire` (a release wakes the next waiter in line; no
//! busy back-off), uses it, and gives it back. Workers live in three
//! "processes" (clients) to show that the exclusion holds across them.
//!
//! The example asserts that no key was ever used by two jobs at once and
//! that every job ran.
//!
//! ```sh
//! cargo run --example api_key_pool             # 24 workers x 10 jobs
//! cargo run --example api_key_pool -- --short  # 24 workers x 3 jobs (CI)
//! ```

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Redlock, Semaphore};

use quorumlock_testkit::server;

const KEYS: usize = 10;
const PROCESSES: usize = 3;
const WORKERS_PER_PROCESS: usize = 8;

/// Lock ttl for one use of a key: longer than a request, renewed anyway.
const TTL: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Stats {
    in_use: [AtomicUsize; KEYS],
    uses: [AtomicUsize; KEYS],
    overlaps: AtomicUsize,
    concurrent: AtomicUsize,
    max_concurrent: AtomicUsize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let short = std::env::args().any(|a| a == "--short");
    let jobs_per_worker = if short { 3 } else { 10 };
    let (urls, _local) = server::nodes_from_env_or_local(3)?;
    println!("nodes: {}", urls.join(" "));
    let stats = Arc::new(Stats::default());
    let mut workers = Vec::new();
    for _ in 0..PROCESSES {
        let redlock = Redlock::builder().nodes(urls.clone()).build()?;
        let keys: Semaphore = redlock.semaphore("llm-api-keys", KEYS)?;
        for _ in 0..WORKERS_PER_PROCESS {
            let (keys, stats) = (keys.clone(), Arc::clone(&stats));
            workers.push(tokio::spawn(async move {
                for _ in 0..jobs_per_worker {
                    let permit = keys.acquire(TTL).await?;
                    call_llm(&stats, permit.index()).await;
                    permit.release().await?;
                }
                Ok::<_, quorumlock::Error>(())
            }));
        }
    }
    for worker in workers {
        worker.await??;
    }

    let jobs = PROCESSES * WORKERS_PER_PROCESS * jobs_per_worker;
    let uses: Vec<usize> = stats.uses.iter().map(|u| u.load(Ordering::Relaxed)).collect();
    let overlaps = stats.overlaps.load(Ordering::SeqCst);
    let max = stats.max_concurrent.load(Ordering::SeqCst);
    println!("uses per key: {uses:?}");
    println!("{jobs} jobs, at most {max} keys in use at once, overlaps: {overlaps}");
    assert_eq!(overlaps, 0, "a key was used by two jobs at once");
    assert_eq!(uses.iter().sum::<usize>(), jobs, "every job ran once");
    assert!(max <= KEYS);
    println!("ok: no key served two jobs at once");
    Ok(())
}

/// Stands for one request to the provider with key `key`.
async fn call_llm(stats: &Stats, key: usize) {
    if stats.in_use[key].fetch_add(1, Ordering::SeqCst) != 0 {
        stats.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let now = stats.concurrent.fetch_add(1, Ordering::SeqCst) + 1;
    stats.max_concurrent.fetch_max(now, Ordering::SeqCst);
    stats.uses[key].fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(20 + rand::random::<u64>() % 30)).await;
    stats.concurrent.fetch_sub(1, Ordering::SeqCst);
    stats.in_use[key].fetch_sub(1, Ordering::SeqCst);
}
