//! `quorumlock demo`: contending workers over local nodes (started here) or
//! given ones, a node crash and restart (local nodes only), a final table.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::Error;
use tokio::time::Instant;

use crate::{Nodes, exit, fail};

use quorumlock_testkit::server::{Persistence, RedisServer};

/// Options of `quorumlock demo`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  quorumlock demo\n  quorumlock demo --workers 10 --seconds 20\n  \
    quorumlock demo --nodes redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003  \
    (given nodes: nothing is started or killed)"
)]
pub(crate) struct Args {
    /// Number of local redis-server nodes to start when no nodes are given.
    #[arg(long, default_value_t = 5)]
    local_nodes: usize,
    /// Number of workers, each with its own client (like separate processes).
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// Number of resources the workers contend for.
    #[arg(long, default_value_t = 3)]
    resources: usize,
    /// Length of the run in seconds.
    #[arg(long, default_value_t = 6)]
    seconds: u64,
    /// Use these nodes instead of starting local ones (then none is killed).
    #[command(flatten)]
    nodes: Nodes,
}

/// Lock ttl used by the workers: short, so a lost holder frees quickly.
const TTL: Duration = Duration::from_secs(2);

/// Simulated work inside the critical section.
const WORK: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Counters {
    acquired: AtomicUsize,
    busy: AtomicUsize,
    lost: AtomicUsize,
    errors: AtomicUsize,
}

/// Marks a worker inside a resource's critical section; counts an overlap
/// when someone else is already inside. Leaves on drop, also when the work
/// is dropped because the lock was lost.
struct Inside<'a> {
    count: &'a AtomicUsize,
}

impl<'a> Inside<'a> {
    fn enter(count: &'a AtomicUsize, overlaps: &AtomicUsize) -> Self {
        if count.fetch_add(1, Ordering::SeqCst) != 0 {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
        Inside { count }
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) async fn run(args: Args) -> ExitCode {
    if args.local_nodes == 0 || args.workers == 0 || args.resources == 0 || args.seconds == 0 {
        return fail(
            exit::USAGE,
            "--local-nodes, --workers, --resources and --seconds must be at least 1",
        );
    }
    let nodes = match args.nodes.resolve() {
        Ok(nodes) => nodes,
        Err(message) => return fail(exit::USAGE, message),
    };
    let mut local = Vec::new();
    let mut urls = nodes.urls.clone();
    if urls.is_empty() {
        println!(
            "starting {} local redis-server nodes (AOF, appendfsync always)...",
            args.local_nodes
        );
        for _ in 0..args.local_nodes {
            match RedisServer::try_start(Persistence::AofAlways, &[]) {
                Ok(node) => local.push(node),
                Err(e) => return fail(exit::UNREACHABLE, e),
            }
        }
        urls = local.iter().map(RedisServer::url).collect();
    } else {
        println!("using the given nodes; none is started, killed or restarted");
    }
    let shown: Vec<String> = urls.iter().map(|url| quorumlock::redact_url(url)).collect();
    println!("nodes: {}", shown.join(" "));
    println!(
        "{} workers contend for {} resources for {} s; quorum {} of {}",
        args.workers,
        args.resources,
        args.seconds,
        urls.len() / 2 + 1,
        urls.len()
    );

    let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..args.resources).map(|_| AtomicUsize::new(0)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    for worker in 0..args.workers {
        let built = nodes.builder_over(&urls).map(|builder| {
            builder
                .retry_delay(Duration::from_millis(20))
                .wait(Duration::from_secs(1))
                .build()
        });
        let redlock = match built {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return fail(exit::USAGE, e),
            Err(message) => return fail(exit::USAGE, message),
        };
        let mine = Arc::new(Counters::default());
        counters.push(Arc::clone(&mine));
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        tasks.push(tokio::spawn(async move {
            let mut round = worker;
            while Instant::now() < end {
                round += 1;
                let resource = round % inside.len();
                // The work is dropped (stops at its next await) if the lock
                // is lost before it completes; with_lock then says so.
                let work = async |_guard: &quorumlock::Guard| {
                    let _inside = Inside::enter(&inside[resource], &overlaps);
                    tokio::time::sleep(WORK).await;
                };
                let outcome = redlock
                    .with_lock(format!("demo:resource:{resource}"), TTL, work)
                    .await;
                let counter = match &outcome {
                    Ok(()) => &mine.acquired,
                    Err(Error::Held { .. }) => &mine.busy,
                    Err(Error::Lost { .. }) => &mine.lost,
                    Err(_) => &mine.errors,
                };
                let seen = counter.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = outcome
                    && !matches!(e, Error::Held { .. })
                    && seen < 3
                {
                    println!("  worker {worker}: {e}");
                }
            }
        }));
    }

    let victim = local.len() / 2;
    let (kill_at, restart_at) = (
        end - Duration::from_secs(args.seconds) * 2 / 3,
        end - Duration::from_secs(args.seconds) / 3,
    );
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let (mut killed, mut restarted) = (false, false);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => {
                crate::say!("interrupted: stopping");
                return ExitCode::FAILURE;
            }
        }
        let now = Instant::now();
        if !local.is_empty() && !killed && now >= kill_at {
            local[victim].kill();
            killed = true;
            println!("  ! killed node {victim} (SIGKILL)");
        }
        if killed && !restarted && now >= restart_at {
            local[victim].restart();
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
    report(&counters, overlaps.load(Ordering::SeqCst))
}

/// Prints the final table; success when something was acquired and no two
/// holders were ever inside one resource at once.
fn report(counters: &[Arc<Counters>], overlaps: usize) -> ExitCode {
    let load = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    println!();
    println!("| worker | acquisitions | busy (gave up waiting) | losses signalled | errors |");
    println!("|-------:|-------------:|-----------------------:|-----------------:|-------:|");
    for (i, c) in counters.iter().enumerate() {
        println!(
            "| {i:>6} | {:>12} | {:>22} | {:>16} | {:>6} |",
            load(&c.acquired),
            load(&c.busy),
            load(&c.lost),
            load(&c.errors)
        );
    }
    let total: usize = counters.iter().map(|c| load(&c.acquired)).sum();
    let lost: usize = counters.iter().map(|c| load(&c.lost)).sum();
    println!();
    println!(
        "acquisitions: {total}, losses signalled: {lost}, overlaps: {overlaps} (two holders of one resource at once)"
    );
    if overlaps == 0 && total > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
