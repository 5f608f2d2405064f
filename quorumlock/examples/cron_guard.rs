//! The nightly archive job of a fleet, run by exactly one instance.
//!
//! Three instances of a service (three containers, each with its own
//! client) are scheduled to archive old conversations at 03:00. They all
//! fire at the same moment and take the lock (`lock`, waiting briefly: when
//! three contenders each win one of three nodes, nobody has a majority and
//! all must retry). Under the lock an instance archives only if that night's
//! archive is not done yet, so exactly one archives and the others skip. The
//! example runs several "nights" and asserts that exactly one instance
//! archived each time.
//!
//! A lock excludes runs that overlap in time. An instance whose schedule
//! fires after the job has already finished (clocks a minute apart, a job of
//! a few seconds) would take the free lock and archive again: make the job
//! idempotent per night (see `quorumlock::Idempotency`, keyed by the date)
//! when that can happen. From a crontab, `quorumlock run --key ... --wait 2s
//! -- job` does the same as this example without any code.
//!
//! ```sh
//! cargo run --example cron_guard             # 10 nights, 3 local redis-server nodes
//! cargo run --example cron_guard -- --short  # 3 nights (CI)
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 cargo run --example cron_guard
//! ```

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use quorumlock::Redlock;
use tokio::sync::Barrier;

use quorumlock_testkit::server;

/// The lock's ttl: longer than the job, and renewed while it runs anyway.
const TTL: Duration = Duration::from_secs(30);

/// How long one archive run takes here.
const JOB: Duration = Duration::from_millis(200);

const INSTANCES: usize = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let short = std::env::args().any(|a| a == "--short");
    let nights = if short { 3 } else { 10 };
    let (urls, _local) = server::nodes_from_env_or_local(3)?;
    println!("{INSTANCES} instances, nodes: {}", urls.join(" "));
    let instances = (0..INSTANCES)
        .map(|_| {
            Redlock::builder()
                .nodes(urls.clone())
                .retry_delay(Duration::from_millis(20))
                .wait(Duration::from_secs(5))
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    // The job's own record of what it archived (a table in the real job).
    let archived = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));

    for night in 1..=nights {
        // Cron fires on every instance at the same moment.
        let start = Arc::new(Barrier::new(INSTANCES));
        let runs = instances.iter().enumerate().map(|(i, redlock)| {
            let (redlock, start, archived) = (redlock.clone(), Arc::clone(&start), Arc::clone(&archived));
            tokio::spawn(async move {
                start.wait().await;
                let guard = redlock.lock("cron:archive-old-conversations", TTL).await?;
                let first = archived.lock().unwrap().insert(night);
                if first {
                    archive_old_conversations(night).await;
                }
                guard.release().await?;
                Ok::<_, quorumlock::Error>(first.then_some(i))
            })
        });
        let mut archived_by = Vec::new();
        for run in futures::future::join_all(runs).await {
            if let Some(instance) = run?? {
                archived_by.push(instance);
            }
        }
        assert_eq!(archived_by.len(), 1, "night {night}: archived by {archived_by:?}");
        println!(
            "night {night:>2}: instance {} archived; the other {} skipped",
            archived_by[0],
            INSTANCES - 1
        );
    }
    println!("ok: every night exactly one of {INSTANCES} instances ran the job");
    Ok(())
}

/// Stands for the real job (moving old rows to cold storage).
async fn archive_old_conversations(_night: u32) {
    tokio::time::sleep(JOB).await;
}
