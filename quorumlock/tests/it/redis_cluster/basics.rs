//! The lock's API over three members that are each a Redis Cluster of three
//! primaries (no replicas: these tests fail nothing), started once for the
//! binary.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use quorumlock::{Error, LockOptions, Setting};
use quorumlock_testkit::redis_cluster::RedisCluster;

use super::{TTL, client, ms};

// Every test runs on two threads: it blocks its own while it looks at the
// clusters (`eventually`), and the library's background work (the writes a
// majority did not wait for, renewals, a waiter) must go on meanwhile.

/// Three clusters of three primaries each.
type Clusters = [RedisCluster; 3];

/// The clusters of the tests of this module running now, started by the
/// first of them (each test locks names of its own). A static would never
/// be dropped, and its servers would outlive the test binary: they stop
/// with the last test that holds them.
fn clusters() -> Arc<Clusters> {
    static SHARED: Mutex<Weak<Clusters>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(clusters) = shared.upgrade() {
        return clusters;
    }
    let clusters: Arc<Clusters> = Arc::new(std::thread::scope(|scope| {
        let starting: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| RedisCluster::start(3, 0)))
            .collect();
        let started: Vec<RedisCluster> = starting
            .into_iter()
            .map(|start| start.join().expect("cluster started"))
            .collect();
        started.try_into().expect("three clusters")
    }));
    *shared = Arc::downgrade(&clusters);
    clusters
}

fn members(clusters: &Clusters) -> Vec<&RedisCluster> {
    clusters.iter().collect()
}

/// The value of `key` as the cluster has it, through `redis-cli -c`.
fn get(cluster: &RedisCluster, key: &str) -> String {
    get_with(cluster, &["GET", key])
}

/// The reply to `command` through `redis-cli -c`, trimmed.
fn get_with(cluster: &RedisCluster, command: &[&str]) -> String {
    cluster.cli(command).expect("redis-cli").trim().to_owned()
}

/// How long a member may take to run a request the lock did not wait for:
/// an acquisition returns once a majority confirmed, and the last member's
/// write may still be on its way.
const LAGGING_WRITE: Duration = Duration::from_secs(5);

/// Waits until `read` gives `expected` (a write that a majority made
/// unnecessary to wait for reaching the last member); panics naming `what`
/// after [`LAGGING_WRITE`].
fn eventually(what: &str, expected: &str, mut read: impl FnMut() -> String) {
    let started = Instant::now();
    loop {
        let value = read();
        if value == expected {
            return;
        }
        assert!(
            started.elapsed() < LAGGING_WRITE,
            "{what}: {value:?}, expected {expected:?}"
        );
        std::thread::sleep(ms(20));
    }
}

/// Takes a lock on each of `names`, in order.
async fn lock_all(redlock: &quorumlock::Redlock, names: &[String]) -> Vec<quorumlock::Guard> {
    let mut guards = Vec::new();
    for name in names {
        let guard = redlock.try_lock(name.as_str(), TTL).await.expect("no error");
        guards.push(guard.expect("acquired"));
    }
    guards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lives_on_the_primary_of_its_slot_in_every_member_and_is_released() {
    let clusters = clusters();
    let redlock = client(&members(&clusters));
    // Names in different slots, so that each member's primaries all serve.
    let names: Vec<String> = (0..12).map(|i| format!("basics:slot-spread:{i}")).collect();
    let guards = lock_all(&redlock, &names).await;
    let primaries: std::collections::HashSet<usize> = names
        .iter()
        .map(|name| clusters[0].primary_for_slot(clusters[0].slot_of(name)))
        .collect();
    assert_eq!(primaries.len(), 3, "the names spread over every primary");
    for (name, guard) in names.iter().zip(&guards) {
        for cluster in clusters.iter() {
            eventually(name, guard.token(), || get(cluster, name));
        }
    }
    for guard in guards {
        guard.release().await.expect("released");
    }
    for name in &names {
        for cluster in clusters.iter() {
            eventually(&format!("{name} left behind"), "", || get(cluster, name));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_over_keys_of_several_slots_is_refused_with_the_slots_and_the_advice() {
    let clusters = clusters();
    let redlock = client(&members(&clusters));
    let error = redlock
        .try_lock(["basics:order:1", "basics:payment:1"], TTL)
        .await
        .expect_err("keys in two slots");
    let Error::Config(config) = &error else {
        panic!("not a configuration error: {error}");
    };
    assert_eq!(config.setting(), Setting::Resources);
    let text = error.to_string();
    assert!(text.contains("slot") && text.contains("hash tag"), "{text}");
    assert!(
        text.contains("basics:order:1") && text.contains("basics:payment:1"),
        "{text}"
    );
    let guard = redlock
        .try_lock(["{basics:order:2}:stock", "{basics:order:2}:payment"], TTL)
        .await
        .expect("one hash tag, one slot")
        .expect("acquired");
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_many_locks_of_many_slots_past_their_ttl() {
    let clusters = clusters();
    let redlock = client(&members(&clusters));
    let names: Vec<String> = (0..40).map(|i| format!("basics:renewed:{i}")).collect();
    let guards = lock_all(&redlock, &names).await;
    tokio::time::sleep(TTL * 2).await;
    for (name, guard) in names.iter().zip(&guards) {
        assert!(guard.is_held(), "{name} lost");
        for cluster in clusters.iter() {
            eventually(&format!("{name} not renewed"), guard.token(), || {
                get(cluster, name)
            });
        }
    }
    for guard in guards {
        guard.release().await.expect("released");
    }
}

/// The hand-off test's waiter polls this seldom, so that a hand-off much
/// sooner can only be the wake-up (with room for a loaded machine).
const POLL: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_handed_the_lock_when_it_is_released() {
    let clusters = clusters();
    let holder = client(&members(&clusters));
    let waiter = client(&members(&clusters));
    let guard = holder
        .try_lock("basics:handoff", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    // The waiter's subscriber connections, made before the hand-off that is
    // measured: a first subscription on a loaded machine may outlast the
    // node timeout, and a waiter whose subscription is not confirmed in
    // time is served by its poll (the documented fallback), not a wake-up.
    let warming = waiter
        .with_options(LockOptions::new().wait(Duration::from_millis(300)))
        .expect("options");
    assert!(matches!(
        warming.lock("basics:handoff", TTL).await,
        Err(Error::Held { .. })
    ));
    // The warm-up waiter leaves its place in line after it gave up, without
    // waiting for the members; a release while its entry is still at the
    // head of the line would name it instead of the waiter measured.
    let queue = |cluster| get_with(cluster, &["ZCARD", "quorumlock:waiters:{basics:handoff}"]);
    eventually("the warm-up waiter's place in line", "000", || {
        clusters.iter().map(queue).collect()
    });
    let waiter = waiter
        .with_options(LockOptions::new().retry_delay(POLL).wait(POLL * 2))
        .expect("options");
    let waiting = tokio::spawn(async move { waiter.lock("basics:handoff", TTL).await });
    // Released once the waiter is in the lock's line on some member (it
    // queues where its attempt was refused, and the attempt returns as soon
    // as a majority has refused).
    eventually("the waiter's place in line", "true", || {
        clusters.iter().any(|cluster| queue(cluster) == "1").to_string()
    });
    let released = Instant::now();
    guard.release().await.expect("released");
    let guard = waiting.await.expect("waiter").expect("handed the lock");
    // Only the wake-up published on a cluster member brings it in well
    // before its next poll.
    assert!(
        released.elapsed() < POLL / 2,
        "the waiter came after {:?}: it polled, no wake-up reached it",
        released.elapsed()
    );
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_and_inspect_and_unlock_see_the_holder() {
    let clusters = clusters();
    let redlock = client(&members(&clusters))
        .with_options(LockOptions::new().fenced(true))
        .expect("options");
    let first = redlock
        .try_lock("basics:fenced", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    let first_fence = first.fence_token().expect("fenced");
    let inspection = redlock.inspect("basics:fenced").await.expect("inspected");
    assert!(
        format!("{inspection:?}").contains(first.token()),
        "inspect names the holder: {inspection:?}"
    );
    first.release().await.expect("released");
    let second = redlock
        .try_lock("basics:fenced", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    assert!(second.fence_token().expect("fenced") > first_fence);
    let report = redlock.force_unlock("basics:fenced").await.expect("unlocked");
    assert!(format!("{report:?}").contains("Deleted"), "{report:?}");
    for cluster in clusters.iter() {
        eventually("the fenced lock after unlock", "", || {
            get(cluster, "basics:fenced")
        });
    }
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_runs_its_work_once() {
    let clusters = clusters();
    let redlock = client(&members(&clusters));
    let jobs = redlock.idempotency();
    let runs = std::sync::atomic::AtomicUsize::new(0);
    for _ in 0..2 {
        let result = jobs
            .run("basics:idempotent", TTL * 5, || async {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, std::io::Error>(b"done".to_vec())
            })
            .await
            .expect("run");
        assert_eq!(result, b"done");
    }
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the work ran twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_members_and_a_single_server_share_one_quorum() {
    let clusters = clusters();
    let single = quorumlock_testkit::server::RedisServer::start();
    let urls = [clusters[0].url(), clusters[1].url(), single.url()];
    let redlock = quorumlock::Redlock::builder()
        .nodes(urls)
        .build()
        .expect("mixed members");
    let guard = redlock
        .try_lock("basics:mixed", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    let on_single = || quorumlock_testkit::get(&single, "basics:mixed").unwrap_or_default();
    eventually("the single server", guard.token(), on_single);
    eventually("the cluster", guard.token(), || get(&clusters[1], "basics:mixed"));
    guard.release().await.expect("released");
    eventually("the single server after the release", "", on_single);
}
