//! Criterion benches of the library alone: one uncontended lock+unlock
//! cycle (`try_lock` + `release`) against local redis-server nodes that the
//! bench starts, at N = 1 and N = 5, plain and fenced.
//!
//! `cargo bench --bench criterion_lock` for the statistics;
//! `cargo test --bench criterion_lock` runs each bench once (a smoke test).
//! The comparison with the raw limit and the peer crates, in one run with
//! alternating rounds, is `cargo run -p quorumlock-compare --release`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use quorumlock::Redlock;

use quorumlock_testkit::server;

use server::RedisServer;

const TTL: Duration = Duration::from_secs(10);

fn lock_unlock(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let keys = AtomicU64::new(0);
    let mut group = c.benchmark_group("lock_unlock");
    for n in [1, 5] {
        let plain = Redlock::builder()
            .nodes(servers[..n].iter().map(RedisServer::url))
            .build()
            .expect("config");
        let fenced = plain.with_options(plain.options().fenced(true)).expect("options");
        for (name, redlock) in [("plain", plain), ("fenced", fenced)] {
            group.bench_function(format!("N={n}/{name}"), |b| {
                b.to_async(&runtime).iter(|| async {
                    let key = format!("criterion:{}", keys.fetch_add(1, Ordering::Relaxed));
                    let guard = redlock
                        .try_lock(key, TTL)
                        .await
                        .expect("lock")
                        .expect("uncontended");
                    guard.release().await.expect("release");
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short windows: a cycle takes tens to hundreds of microseconds, and
    // these machines are shared (compare ratios within one run only).
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = lock_unlock
}
criterion_main!(benches);
