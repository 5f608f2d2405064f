//! `quorumlock demo`: contending workers over local nodes (started here) or
//! given ones, a node crash and restart (local nodes only), a final table
//! and a chart of every lock call (see [`chart`]).

mod chart;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use tokio::time::Instant;

use crate::exit::Exit;
use crate::nodes::Resolved;
use crate::{Nodes, fail};
use chart::{Call, Outcome, Timeline};

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
    /// Where to write the closing chart (SVG): acquire latency, and acquisitions and losses
    /// over time with the node's kill and restart.
    #[arg(long, value_name = "PATH", default_value = "quorumlock-demo.svg")]
    chart: PathBuf,
    /// Use these nodes instead of starting local ones (then none is killed).
    #[command(flatten)]
    nodes: Nodes,
}

/// Lock ttl used by the workers: short, so a lost holder frees quickly.
const TTL: Duration = Duration::from_secs(2);

/// Simulated work inside the critical section.
const WORK: Duration = Duration::from_millis(10);

/// The workers' retry delay: short, so that a few seconds see many
/// acquisitions.
const RETRY_DELAY: Duration = Duration::from_millis(20);

/// How long a worker waits for a busy resource before counting it busy.
const WAIT: Duration = Duration::from_secs(1);

/// How often the progress line is printed (and the crash schedule looked at).
const TICK: Duration = Duration::from_secs(1);

/// Errors printed per worker and kind; the rest are only counted.
const ERRORS_SHOWN: usize = 3;

#[derive(Default)]
struct Counters {
    acquired: AtomicUsize,
    busy: AtomicUsize,
    lost: AtomicUsize,
    errors: AtomicUsize,
}

/// The resources: how many workers are inside each, and how often two were
/// inside one at once.
struct Arena {
    inside: Vec<AtomicUsize>,
    overlaps: AtomicUsize,
}

/// Marks a worker inside a resource's critical section; counts an overlap
/// when someone else is already inside. Leaves on drop, also when the work
/// is dropped because the lock was lost.
struct Inside<'a> {
    count: &'a AtomicUsize,
}

impl<'a> Inside<'a> {
    fn enter(arena: &'a Arena, resource: usize) -> Self {
        let count = &arena.inside[resource];
        if count.fetch_add(1, Ordering::SeqCst) != 0 {
            arena.overlaps.fetch_add(1, Ordering::SeqCst);
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
            Exit::Usage,
            "--local-nodes, --workers, --resources and --seconds must be at least 1",
        );
    }
    let nodes = match args.nodes.resolve() {
        Ok(nodes) => nodes,
        Err(message) => return fail(Exit::Usage, message),
    };
    let (mut local, urls) = match local_or_given(&args, &nodes) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let arena = Arc::new(Arena {
        inside: (0..args.resources).map(|_| AtomicUsize::new(0)).collect(),
        overlaps: AtomicUsize::new(0),
    });
    let length = Duration::from_secs(args.seconds);
    let begun = Instant::now();
    let end = begun + length;
    let mut counters = Vec::new();
    let mut tasks = Vec::new();
    for worker in 0..args.workers {
        let built = nodes
            .builder_over(&urls)
            .map(|builder| builder.retry_delay(RETRY_DELAY).wait(WAIT).build());
        let redlock = match built {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return fail(Exit::Usage, e),
            Err(message) => return fail(Exit::Usage, message),
        };
        let mine = Arc::new(Counters::default());
        counters.push(Arc::clone(&mine));
        tasks.push(tokio::spawn(contend(
            worker,
            redlock,
            Arc::clone(&arena),
            mine,
            end,
        )));
    }
    let (killed, restarted) = match crash_and_restart(&args, &mut local, &counters, end).await {
        Ok(instants) => instants,
        Err(code) => return code,
    };
    let mut calls = Vec::new();
    for task in tasks {
        calls.extend(task.await.unwrap_or_default());
    }
    let code = report(&counters, arena.overlaps.load(Ordering::SeqCst));
    let timeline = Timeline {
        begun,
        length,
        calls,
        killed,
        restarted,
    };
    match chart::draw(&args.chart, &timeline) {
        Ok(()) => println!("chart: {}", args.chart.display()),
        Err(e) => crate::say!(
            "quorumlock: warning: cannot write the chart {}: {e}",
            args.chart.display()
        ),
    }
    code
}

/// Starts the local nodes when none were given; the servers (none for
/// given nodes) and every node's URL, after printing what the demo does.
fn local_or_given(args: &Args, nodes: &Resolved) -> Result<(Vec<RedisServer>, Vec<String>), ExitCode> {
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
                Err(e) => return Err(fail(Exit::Unreachable, e)),
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
        quorumlock::probe::majority(urls.len()),
        urls.len()
    );
    Ok((local, urls))
}

/// One worker until `end`: takes the resources in turn, works inside each,
/// and counts what happened; returns every lock call, for the chart.
async fn contend(
    worker: usize,
    redlock: Redlock,
    arena: Arc<Arena>,
    counters: Arc<Counters>,
    end: Instant,
) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut round = worker;
    while Instant::now() < end {
        round += 1;
        let resource = round % arena.inside.len();
        // The work is dropped (stops at its next await) if the lock is lost
        // before it completes; with_lock then says so.
        let work = async |guard: &quorumlock::Guard| {
            let _inside = Inside::enter(&arena, resource);
            tokio::time::sleep(WORK).await;
            guard.acquisition().waited()
        };
        let outcome = redlock
            .with_lock(format!("demo:resource:{resource}"), TTL, work)
            .await;
        let (counter, call) = match &outcome {
            Ok(waited) => (&counters.acquired, Outcome::Acquired(*waited)),
            Err(Error::Held { .. }) => (&counters.busy, Outcome::Busy),
            Err(Error::Lost { .. }) => (&counters.lost, Outcome::Lost),
            Err(_) => (&counters.errors, Outcome::Failed),
        };
        calls.push(Call {
            at: Instant::now(),
            outcome: call,
        });
        let seen = counter.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = outcome
            && !matches!(e, Error::Held { .. })
            && seen < ERRORS_SHOWN
        {
            println!("  worker {worker}: {e}");
        }
    }
    calls
}

/// Until `end`, prints the acquisitions every second and, with local nodes,
/// kills the middle one a third of the way in and restarts it two thirds in;
/// returns when it did each. Ctrl-C ends the demo (the error is its exit
/// status).
async fn crash_and_restart(
    args: &Args,
    local: &mut [RedisServer],
    counters: &[Arc<Counters>],
    end: Instant,
) -> Result<(Option<Instant>, Option<Instant>), ExitCode> {
    let victim = local.len() / 2;
    let length = Duration::from_secs(args.seconds);
    let (kill_at, restart_at) = (end - length * 2 / 3, end - length / 3);
    let mut ticker = tokio::time::interval(TICK);
    let (mut killed, mut restarted) = (None, None);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => {
                crate::say!("interrupted: stopping");
                return Err(Exit::DemoFailed.into());
            }
        }
        let now = Instant::now();
        if !local.is_empty() && killed.is_none() && now >= kill_at {
            local[victim].kill();
            killed = Some(Instant::now());
            println!("  ! killed node {victim} (SIGKILL)");
        }
        if killed.is_some() && restarted.is_none() && now >= restart_at {
            local[victim].restart();
            restarted = Some(Instant::now());
            println!("  ! restarted node {victim} on the same port (its AOF brought the keys back)");
        }
        let total: usize = counters.iter().map(|c| c.acquired.load(Ordering::Relaxed)).sum();
        println!(
            "  {:>4.1} s: {total} acquisitions",
            args.seconds as f64 - end.saturating_duration_since(now).as_secs_f64()
        );
        if now >= end {
            return Ok((killed, restarted));
        }
    }
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
        Exit::Success.into()
    } else {
        Exit::DemoFailed.into()
    }
}
