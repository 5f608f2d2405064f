//! Cost of keeping many locks alive: quorumlock's shared watchdog against one
//! renewal timer per lock, in one run.
//!
//! Both keep `LOCKS` locks alive on 5 local nodes for a measuring window:
//! - watchdog: one client holding the locks with auto-renewal (one script
//!   call per node per tick for all due locks);
//! - per-lock timers: one task per lock with its own interval at ttl/3,
//!   sending the owner-checked extend script to every node (what a naive
//!   watchdog does, but owner-checked), over the same kind of connections.
//!
//! Reported per variant: script calls the servers executed (every `EVAL`,
//! `EVALSHA` and `FCALL` form, pipelined or not, from `INFO commandstats`),
//! and the client's CPU time (the time its threads ran, from
//! /proc/self/task/*/schedstat, in nanoseconds), both per second of the
//! window; and for the watchdog, the heap bytes each held lock costs (a
//! counting allocator: live bytes with the locks held and renewed, less live
//! bytes before they were taken, over the number of locks), sampled over a
//! renewal period: the least (between renewal rounds) and the most (a round
//! in flight). A count that must
//! not be zero (the watchdog's script calls) stops the run rather than give a
//! ratio over it.
//!
//! `cargo bench --bench watchdog` (10,000 locks); `-- --smoke` for a tiny run.

use std::time::Duration;

use futures::future::join_all;
use quorumlock::Redlock;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use quorumlock_testkit::alloc::Counting;
use quorumlock_testkit::server;

#[global_allocator]
static ALLOC: Counting = Counting;

use server::RedisServer;

const TTL: Duration = Duration::from_secs(3);

const EXTEND: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (locks, window) = if smoke {
        (200, Duration::from_secs(1))
    } else {
        (10_000, Duration::from_secs(6))
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let (ours, heap) = runtime.block_on(watchdog(&servers, locks, window));
    let naive = runtime.block_on(per_lock_timers(&servers, locks, window));
    assert!(
        ours.calls > 0.0,
        "the watchdog made no script call in {window:?}: the count is broken, not the watchdog free"
    );
    assert!(
        naive.calls > 0.0,
        "the per-lock timers made no script call in {window:?}"
    );
    println!("{locks} locks, ttl {TTL:?}, 5 nodes, window {window:?}, tokio current_thread");
    println!();
    println!("| renewal | script calls/s per node | client CPU ms/s |");
    println!("|---|---:|---:|");
    println!("| shared watchdog | {:.1} | {:.2} |", ours.calls, ours.cpu_ms);
    println!("| timer per lock | {:.1} | {:.2} |", naive.calls, naive.cpu_ms);
    println!();
    println!(
        "ratio timer-per-lock / watchdog: {:.0}x round trips, {} client CPU",
        naive.calls / ours.calls,
        if ours.cpu_ms > 0.0 {
            format!("{:.1}x", naive.cpu_ms / ours.cpu_ms)
        } else {
            "no ratio (the watchdog used no measurable CPU)".to_owned()
        }
    );
    println!(
        "shared watchdog: {:.0} heap bytes per held lock between renewals, {:.0} at the peak of a renewal round",
        heap.between_renewals, heap.peak
    );
}

struct Cost {
    /// Script calls per second per node (mean over nodes).
    calls: f64,
    /// Client CPU milliseconds per second.
    cpu_ms: f64,
}

/// Measures `window` of steady state: server script calls and client CPU.
async fn measure(servers: &[RedisServer], window: Duration) -> Cost {
    let calls = || servers.iter().map(quorumlock_testkit::script_calls).sum::<u64>();
    let (calls_before, cpu_before) = (calls(), cpu_time());
    tokio::time::sleep(window).await;
    let (calls_after, cpu_after) = (calls(), cpu_time());
    let secs = window.as_secs_f64();
    Cost {
        calls: (calls_after - calls_before) as f64 / servers.len() as f64 / secs,
        cpu_ms: (cpu_after - cpu_before).as_secs_f64() * 1e3 / secs,
    }
}

/// The watchdog's cost, and the heap bytes per held lock.
async fn watchdog(servers: &[RedisServer], locks: usize, window: Duration) -> (Cost, Heap) {
    let redlock = Redlock::builder()
        .nodes(servers.iter().map(RedisServer::url))
        .build()
        .unwrap();
    // Connect and load the scripts first, so that the heap figure is the
    // locks' and not the client's.
    redlock
        .try_lock("wd:warmup", TTL)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    let mut guards = Vec::with_capacity(locks);
    let before = Counting::snapshot();
    for batch in 0..locks.div_ceil(500) {
        let attempts =
            (0..500.min(locks - batch * 500)).map(|i| redlock.try_lock(format!("wd:{batch}:{i}"), TTL));
        guards.extend(join_all(attempts).await.into_iter().map(|g| g.unwrap().unwrap()));
    }
    // Let renewal reach its steady rhythm before measuring.
    tokio::time::sleep(TTL / 3).await;
    let cost = measure(servers, window).await;
    // Sampled over one renewal period: the least is what the held locks
    // cost between renewals, the most adds a renewal round in flight (its
    // commands and replies), which one snapshot may or may not catch.
    let (mut least, mut most) = (i64::MAX, i64::MIN);
    let period = Instant::now() + TTL / 3;
    while Instant::now() < period {
        let live = Counting::snapshot().live();
        (least, most) = (least.min(live), most.max(live));
        tokio::time::sleep(HEAP_SAMPLE_EVERY).await;
    }
    assert!(guards.iter().all(|g| g.is_held()), "the watchdog kept every lock");
    join_all(guards.into_iter().map(|g| g.release())).await;
    let per_lock = |live: i64| (live - before.live()) as f64 / locks as f64;
    (
        cost,
        Heap {
            between_renewals: per_lock(least),
            peak: per_lock(most),
        },
    )
}

/// How often the heap is sampled over a renewal period: often next to the
/// period (a second), so that both a quiet moment and a round in flight are
/// seen.
const HEAP_SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// Heap bytes per held lock.
struct Heap {
    /// Between renewal rounds: what holding a lock costs.
    between_renewals: f64,
    /// The most seen over a renewal period, a round in flight included.
    peak: f64,
}

async fn per_lock_timers(servers: &[RedisServer], locks: usize, window: Duration) -> Cost {
    let mut conns = Vec::new();
    for server in servers {
        let client = redis::Client::open(server.url()).unwrap();
        conns.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let ttl_ms = TTL.as_millis() as u64;
    let mut tasks = Vec::with_capacity(locks);
    for i in 0..locks {
        let (key, token) = (format!("naive:{i}"), format!("{:032x}", rand::random::<u128>()));
        for conn in &conns {
            let mut conn = conn.clone();
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let conns: Vec<MultiplexedConnection> = conns.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(Instant::now() + TTL / 3, TTL / 3);
            loop {
                tick.tick().await;
                join_all(conns.iter().map(|c| {
                    let mut c = c.clone();
                    let (key, token) = (&key, &token);
                    async move {
                        let _: i64 = redis::cmd("EVAL")
                            .arg(EXTEND)
                            .arg(1)
                            .arg(key)
                            .arg(token)
                            .arg(ttl_ms)
                            .query_async(&mut c)
                            .await
                            .unwrap();
                    }
                }))
                .await;
            }
        }));
    }
    tokio::time::sleep(TTL / 3).await;
    let cost = measure(servers, window).await;
    for task in tasks {
        task.abort();
    }
    cost
}

/// The time this process's threads have run on a CPU (Linux schedstat,
/// nanoseconds: finer than the 10 ms ticks of /proc/self/stat).
fn cpu_time() -> Duration {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path().join("schedstat");
        // A thread that exited since the listing has no file any more.
        if let Ok(stat) = std::fs::read_to_string(path) {
            total += stat
                .split(' ')
                .next()
                .and_then(|ns| ns.parse::<u64>().ok())
                .unwrap();
        }
    }
    Duration::from_nanos(total)
}
