//! `quorumlock demo`: local nodes, contending workers, a node crash, a table.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use tokio::time::Instant;

#[path = "../../../tests/support/server.rs"]
mod server;

use server::{Persistence, RedisServer};

/// Options of `quorumlock demo`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Number of local redis-server nodes.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Number of workers, each with its own client (like separate processes).
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// Number of resources the workers contend for.
    #[arg(long, default_value_t = 3)]
    resources: usize,
    /// Length of the run in seconds.
    #[arg(long, default_value_t = 6)]
    seconds: u64,
}

/// Lock ttl used by the workers: short, so a lost holder frees quickly.
const TTL: Duration = Duration::from_secs(2);

/// Simulated work inside the critical section.
const WORK: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Counters {
    acquired: AtomicUsize,
    busy: AtomicUsize,
    errors: AtomicUsize,
}

pub(crate) async fn run(args: Args) -> ExitCode {
    if args.nodes == 0 || args.workers == 0 || args.resources == 0 || args.seconds == 0 {
        eprintln!("error: --nodes, --workers, --resources and --seconds must be at least 1");
        return ExitCode::from(2);
    }
    println!(
        "starting {} local redis-server nodes (AOF, appendfsync always)...",
        args.nodes
    );
    let mut nodes = Vec::new();
    for _ in 0..args.nodes {
        match RedisServer::try_start(Persistence::AofAlways, &[]) {
            Ok(node) => nodes.push(node),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    println!("nodes: {}", urls.join(" "));
    println!(
        "{} workers contend for {} resources for {} s; quorum {} of {}",
        args.workers,
        args.resources,
        args.seconds,
        args.nodes / 2 + 1,
        args.nodes
    );

    let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..args.resources).map(|_| AtomicUsize::new(0)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    for worker in 0..args.workers {
        let redlock = match Redlock::builder()
            .nodes(urls.clone())
            .retry_delay(Duration::from_millis(20))
            .wait(Duration::from_secs(1))
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mine = Arc::new(Counters::default());
        counters.push(Arc::clone(&mine));
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        tasks.push(tokio::spawn(async move {
            let mut round = worker;
            while Instant::now() < end {
                round += 1;
                let resource = round % inside.len();
                match redlock.lock(format!("demo:resource:{resource}"), TTL).await {
                    Ok(guard) => {
                        if inside[resource].fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::time::sleep(WORK).await;
                        inside[resource].fetch_sub(1, Ordering::SeqCst);
                        mine.acquired.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = guard.release().await
                            && mine.errors.fetch_add(1, Ordering::Relaxed) < 3
                        {
                            println!("  worker {worker}: release: {e}");
                        }
                    }
                    Err(Error::Held { .. }) => {
                        mine.busy.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if mine.errors.fetch_add(1, Ordering::Relaxed) < 3 {
                            println!("  worker {worker}: {e}");
                        }
                    }
                }
            }
        }));
    }

    let victim = nodes.len() / 2;
    let (kill_at, restart_at) = (
        end - Duration::from_secs(args.seconds) * 2 / 3,
        end - Duration::from_secs(args.seconds) / 3,
    );
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut killed = false;
    let mut restarted = false;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: stopping the nodes");
                return ExitCode::FAILURE;
            }
        }
        let now = Instant::now();
        if !killed && now >= kill_at {
            nodes[victim].kill();
            killed = true;
            println!("  ! killed node {victim} (SIGKILL)");
        }
        if killed && !restarted && now >= restart_at {
            nodes[victim].restart();
            restarted = true;
            println!("  ! restarted node {victim} on the same port (its AOF brought the keys back)");
        }
        let total: usize = counters.iter().map(|c| c.acquired.load(Ordering::Relaxed)).sum();
        println!(
            "  {:>4.1} s: {total} acquisitions",
            args.seconds as f64 - end.saturating_duration_since(now).as_secs_f64()
        );
        if now >= end {
            break;
        }
    }
    for task in tasks {
        let _ = task.await;
    }

    println!();
    println!("| worker | acquisitions | busy (gave up waiting) | errors |");
    println!("|-------:|-------------:|-----------------------:|-------:|");
    for (i, c) in counters.iter().enumerate() {
        println!(
            "| {i:>6} | {:>12} | {:>22} | {:>6} |",
            c.acquired.load(Ordering::Relaxed),
            c.busy.load(Ordering::Relaxed),
            c.errors.load(Ordering::Relaxed)
        );
    }
    let total: usize = counters.iter().map(|c| c.acquired.load(Ordering::Relaxed)).sum();
    let overlaps = overlaps.load(Ordering::SeqCst);
    println!();
    println!("acquisitions: {total}, overlaps: {overlaps} (two holders of one resource at once)");
    if overlaps == 0 && total > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
