//! Lock+unlock latency of quorumlock against the raw limit, in one run.
//!
//! Starts its own redis-server nodes and, for N = 1 and N = 5, times one
//! task doing uncontended lock+unlock cycles with
//! - raw: `SET key token NX PX` to every node at once, returning at a
//!   majority, then an owner-checked release script (`EVALSHA`, preloaded)
//!   to every node at once, sent with the redis crate directly: what a lock
//!   costs with nothing in between;
//! - quorumlock: `try_lock` + `release`;
//! - quorumlock fenced: the same with fencing tokens (the token usually
//!   comes with the grant).
//!
//! Short rounds alternate between the two so that machine noise (large on
//! shared machines) hits both alike; the table gives the median over rounds
//! of each round's p50 and p99, and the median of the per-round ratios
//! quorumlock / raw (each ratio from two adjacent rounds).
//!
//! A last table gives the heap allocations and bytes allocated per cycle of
//! each (a counting allocator, over the timed cycles of one more round).
//!
//! `cargo bench --bench latency` for the real figures;
//! `cargo bench --bench latency -- --smoke` (or `cargo test --bench latency -- --smoke`)
//! for a tiny run that only proves the code works.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use quorumlock::Redlock;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use quorumlock_testkit::alloc::Counting;
use quorumlock_testkit::server;

#[global_allocator]
static ALLOC: Counting = Counting;

use server::RedisServer;

const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

struct Settings {
    rounds: usize,
    cycles: usize,
    warmup: usize,
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let settings = if smoke {
        Settings {
            rounds: 1,
            cycles: 20,
            warmup: 5,
        }
    } else {
        Settings {
            rounds: 31,
            cycles: 400,
            warmup: 50,
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    println!(
        "lock+unlock, one task, uncontended; {} rounds x {} cycles; tokio current_thread",
        settings.rounds, settings.cycles
    );
    println!();
    println!(
        "| N | raw p50 us | ours p50 us | ratio p50 | raw p99 us | ours p99 us | ratio p99 | fenced p50 us | fenced / ours p50 |"
    );
    println!("|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    let mut allocations = Vec::new();
    for n in [1, 5] {
        let nodes = &servers[..n];
        let (raw, ours, fenced, allocs) = runtime.block_on(measure(nodes, &settings));
        allocations.push((n, allocs));
        let median_of = |f: &dyn Fn(usize) -> f64| median((0..raw.len()).map(f).collect());
        println!(
            "| {n} | {:.0} | {:.0} | {:.3} | {:.0} | {:.0} | {:.3} | {:.0} | {:.3} |",
            median_of(&|i| raw[i].0),
            median_of(&|i| ours[i].0),
            median_of(&|i| ours[i].0 / raw[i].0),
            median_of(&|i| raw[i].1),
            median_of(&|i| ours[i].1),
            median_of(&|i| ours[i].1 / raw[i].1),
            median_of(&|i| fenced[i].0),
            median_of(&|i| fenced[i].0 / ours[i].0),
        );
    }
    println!();
    println!(
        "| N | raw allocs/cycle | ours allocs/cycle | fenced allocs/cycle | raw bytes/cycle | ours bytes/cycle | fenced bytes/cycle |"
    );
    println!("|--:|--:|--:|--:|--:|--:|--:|");
    for (n, [raw, ours, fenced]) in allocations {
        println!(
            "| {n} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} |",
            raw.0, ours.0, fenced.0, raw.1, ours.1, fenced.1
        );
    }
}

/// Allocations and bytes allocated per cycle.
type PerCycle = (f64, f64);

type Rounds = Vec<(f64, f64)>;

/// Per round: (p50, p99) in microseconds, for raw, quorumlock and fenced;
/// then the allocations per cycle of each.
async fn measure(nodes: &[RedisServer], s: &Settings) -> (Rounds, Rounds, Rounds, [PerCycle; 3]) {
    let mut conns = Vec::new();
    for node in nodes {
        let client = redis::Client::open(node.url()).unwrap();
        conns.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let mut sha = String::new();
    for conn in &mut conns {
        sha = load_release(conn).await;
    }
    let redlock = Redlock::builder()
        .nodes(nodes.iter().map(RedisServer::url))
        .build()
        .unwrap();
    let fenced = redlock.with_options(redlock.options().fenced(true)).unwrap();
    let ttl = Duration::from_secs(10);
    let (mut raw, mut ours, mut fenced_rounds) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..s.rounds {
        raw.push(sample(s, |i| raw_cycle(&conns, &sha, format!("raw:{round}:{i}"))).await);
        ours.push(sample(s, |i| lock_unlock(&redlock, format!("ql:{round}:{i}"), ttl)).await);
        fenced_rounds.push(sample(s, |i| lock_unlock(&fenced, format!("qf:{round}:{i}"), ttl)).await);
    }
    let allocs = [
        allocations(s, |i| raw_cycle(&conns, &sha, format!("raw:a:{i}"))).await,
        allocations(s, |i| lock_unlock(&redlock, format!("ql:a:{i}"), ttl)).await,
        allocations(s, |i| lock_unlock(&fenced, format!("qf:a:{i}"), ttl)).await,
    ];
    (raw, ours, fenced_rounds, allocs)
}

/// Allocations and bytes allocated per cycle over `cycles` runs after
/// `warmup`. Background work of a cycle (a batch flush, a pub/sub task)
/// that outlives it is counted in the next one, so the mean is the cost.
async fn allocations<F, Fut>(s: &Settings, mut cycle: F) -> PerCycle
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..s.warmup {
        cycle(i).await;
    }
    let before = Counting::snapshot();
    for i in s.warmup..s.warmup + s.cycles {
        cycle(i).await;
    }
    let after = Counting::snapshot();
    let cycles = s.cycles as f64;
    (
        (after.allocations - before.allocations) as f64 / cycles,
        (after.allocated - before.allocated) as f64 / cycles,
    )
}

/// Times `warmup + cycles` runs of `cycle(i)`; p50 and p99 of the timed ones.
async fn sample<F, Fut>(s: &Settings, mut cycle: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(s.cycles);
    for i in 0..s.warmup + s.cycles {
        let started = Instant::now();
        cycle(i).await;
        if i >= s.warmup {
            samples.push(started.elapsed());
        }
    }
    percentiles(&mut samples)
}

async fn lock_unlock(redlock: &Redlock, key: String, ttl: Duration) {
    let guard = redlock.try_lock(key, ttl).await.unwrap().unwrap();
    guard.release().await.unwrap();
}

/// Loads the raw release script on a node and returns its SHA1.
async fn load_release(conn: &mut MultiplexedConnection) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE)
        .query_async(conn)
        .await
        .unwrap()
}

/// SET NX PX on all nodes, return at a majority; release on all nodes.
async fn raw_cycle(conns: &[MultiplexedConnection], sha: &str, key: String) {
    let key = key.as_str();
    let token = format!("{:032x}", rand::random::<u128>());
    let quorum = conns.len() / 2 + 1;
    let mut sets: FuturesUnordered<_> = conns
        .iter()
        .map(|c| {
            let mut c = c.clone();
            let token = token.clone();
            async move {
                let r: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async(&mut c)
                    .await
                    .unwrap();
                r.is_some()
            }
        })
        .collect();
    let mut granted = 0;
    while let Some(ok) = sets.next().await {
        granted += usize::from(ok);
        if granted >= quorum {
            break;
        }
    }
    assert!(granted >= quorum);
    let releases = conns.iter().map(|c| {
        let mut c = c.clone();
        let token = token.clone();
        async move {
            let _: i64 = redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(key)
                .arg(&token)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    futures::future::join_all(releases).await;
}

fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
