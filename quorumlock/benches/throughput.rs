//! Throughput under load: T tasks on distinct keys doing lock+unlock cycles
//! for a few seconds, at N = 1, 3, 5, for
//! - raw: concurrent `SET NX PX` to every node (returning at a majority) and
//!   a concurrent owner-checked release (`EVALSHA`), one command per lock per
//!   node, sent with the redis crate directly;
//! - quorumlock with batching (the default) and without.
//!
//! Two ways of driving the tasks, since batching depends on how requests
//! arrive: **spawned** (each task a `tokio::spawn`, as a server's request
//! handlers are) and **one task** (all of them futures joined inside one
//! task, as with `join_all` or `buffer_unordered` in a batch job).
//!
//! Rounds alternate between the three so that machine noise hits all alike;
//! the table gives medians over rounds of cycles/s and the median of the
//! per-round ratios to raw, and the script calls (every `EVAL`/`EVALSHA` form) per cycle per
//! node of the batched client (without batching it is 1: the release).
//!
//! `cargo bench --bench throughput`; `-- --smoke` for a tiny run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use quorumlock::Redlock;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use quorumlock_testkit::server;

use server::RedisServer;

const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
const TTL: Duration = Duration::from_secs(10);

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let (rounds, window, task_counts): (usize, Duration, &[usize]) = if smoke {
        (1, Duration::from_millis(200), &[8])
    } else {
        (5, Duration::from_secs(2), &[8, 64, 256])
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    println!("lock+unlock cycles/s, distinct keys, {rounds} rounds x {window:?}, tokio current_thread");
    println!();
    println!(
        "| tasks driven | N | tasks | raw | batched | unbatched | batched / raw | unbatched / raw | script calls per cycle per node (batched) |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for spawned in [true, false] {
        for n in [1, 3, 5] {
            for &tasks in task_counts {
                let nodes = &servers[..n];
                let row = runtime.block_on(compare(nodes, tasks, spawned, rounds, window));
                println!(
                    "| {} | {n} | {tasks} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} |",
                    if spawned { "spawned" } else { "one task" },
                    row.raw,
                    row.batched,
                    row.unbatched,
                    row.batched_ratio,
                    row.unbatched_ratio,
                    row.commands
                );
            }
        }
    }
}

struct Row {
    raw: f64,
    batched: f64,
    unbatched: f64,
    batched_ratio: f64,
    unbatched_ratio: f64,
    commands: f64,
}

async fn compare(nodes: &[RedisServer], tasks: usize, spawned: bool, rounds: usize, window: Duration) -> Row {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let batched = Redlock::builder().nodes(urls.clone()).build().unwrap();
    let unbatched = Redlock::builder().nodes(urls).batching(false).build().unwrap();
    let mut conns = Vec::new();
    let mut sha = String::new();
    for node in nodes {
        let mut conn = redis::Client::open(node.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE)
            .query_async(&mut conn)
            .await
            .unwrap();
        conns.push(conn);
    }
    let (mut raw, mut with, mut without, mut commands) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (c, s) = (conns.clone(), sha.clone());
        raw.push(
            run(tasks, spawned, window, move |key| {
                raw_cycle(c.clone(), s.clone(), key)
            })
            .await,
        );
        let before = script_calls(nodes);
        let b = batched.clone();
        let cycles = run(tasks, spawned, window, move |key| ours(b.clone(), key)).await;
        commands.push(
            (script_calls(nodes) - before) as f64 / (cycles * window.as_secs_f64()) / nodes.len() as f64,
        );
        with.push(cycles);
        let u = unbatched.clone();
        without.push(run(tasks, spawned, window, move |key| ours(u.clone(), key)).await);
        let _ = round;
    }
    let ratio = |a: &[f64]| median(a.iter().zip(&raw).map(|(x, r)| x / r).collect());
    Row {
        raw: median(raw.clone()),
        batched: median(with.clone()),
        unbatched: median(without.clone()),
        batched_ratio: ratio(&with),
        unbatched_ratio: ratio(&without),
        commands: median(commands),
    }
}

/// Runs `tasks` tasks doing `cycle` on their own keys for `window`, each a
/// task of its own when `spawned`, else all inside the calling task;
/// returns cycles per second.
async fn run<F, Fut>(tasks: usize, spawned: bool, window: Duration, cycle: F) -> f64
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    // Keys of their own per run: a release returns at a majority, and the
    // last deletes of one run may still be on their way when the next
    // starts; with the same names, its first locks could be refused.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + window;
    let mut workers: FuturesUnordered<BoxFuture<'static, ()>> = (0..tasks)
        .map(|t| {
            let (done, cycle) = (Arc::clone(&done), cycle.clone());
            let worker = async move {
                let mut i = 0u64;
                while Instant::now() < stop {
                    cycle(format!("tp:{run}:{t}:{i}")).await;
                    i += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            };
            if spawned {
                let task = tokio::spawn(worker);
                async move { task.await.expect("worker") }.boxed()
            } else {
                worker.boxed()
            }
        })
        .collect();
    while workers.next().await.is_some() {}
    done.load(Ordering::Relaxed) as f64 / window.as_secs_f64()
}

async fn ours(redlock: Redlock, key: String) {
    let guard = redlock.try_lock(key, TTL).await.unwrap().unwrap();
    guard.release().await.unwrap();
}

async fn raw_cycle(conns: Vec<MultiplexedConnection>, sha: String, key: String) {
    let token = format!("{:032x}", rand::random::<u128>());
    let quorum = conns.len() / 2 + 1;
    let mut sets: FuturesUnordered<_> = conns
        .iter()
        .map(|c| {
            let (mut c, key, token) = (c.clone(), &key, &token);
            async move {
                let r: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
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
    drop(sets);
    let releases = conns.iter().map(|c| {
        let (mut c, key, token, sha) = (c.clone(), &key, &token, &sha);
        async move {
            let _: i64 = redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(key)
                .arg(token)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    futures::future::join_all(releases).await;
}

/// Script calls the nodes executed so far, every form counted.
fn script_calls(nodes: &[RedisServer]) -> u64 {
    nodes.iter().map(quorumlock_testkit::script_calls).sum()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
