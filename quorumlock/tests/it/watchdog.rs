//! The shared watchdog: locks stay alive while held, heal on restarted
//! nodes, and holders learn of a loss on time, whatever the nodes do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::{
    RedisServer, all_empty, builder, calls, dbsize, get, pttl, set_foreign, start_nodes,
};
use tokio::time::Instant;

/// Scheduling slack allowed between `valid_until` and the moment a loss is
/// seen (a loaded 2-core CI machine runs many tests at once).
const TOLERANCE: Duration = Duration::from_millis(150);

fn watched(servers: &[RedisServer]) -> Redlock {
    builder(servers)
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

#[tokio::test]
async fn lock_held_for_three_times_its_ttl_stays_held_on_every_node() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let ttl = Duration::from_secs(1);
    let started = Instant::now();
    let guard = redlock.try_lock("long-job", ttl).await.unwrap().unwrap();
    while started.elapsed() < ttl * 3 {
        assert!(guard.is_held(), "lost after {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        guard.valid_until() > started + ttl * 3 - ttl / 2,
        "validity kept moving"
    );
    for server in &servers {
        assert_eq!(get(server, "long-job").as_deref(), Some(guard.token()));
        assert!(pttl(server, "long-job") > 0);
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn killed_majority_fires_the_loss_by_valid_until_and_cancels_with_lock() {
    let mut servers = start_nodes(3);
    let redlock = watched(&servers);
    let ticks = Arc::new(AtomicUsize::new(0));
    let last_valid_until = Arc::new(Mutex::new(None));
    let work = {
        let (ticks, last_valid_until) = (Arc::clone(&ticks), Arc::clone(&last_valid_until));
        redlock.with_lock("pdf:500", Duration::from_secs(1), async move |guard| {
            loop {
                *last_valid_until.lock().unwrap() = Some(guard.valid_until());
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let fault = async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        servers[0].kill();
        servers[1].kill();
    };
    let (result, ()) = tokio::join!(work, fault);
    let lost_at = Instant::now();
    assert!(matches!(result, Err(Error::Lost { .. })), "{result:?}");
    let valid_until = last_valid_until.lock().unwrap().expect("work ran");
    assert!(
        lost_at + Duration::from_millis(1) >= valid_until,
        "not before the validity ended"
    );
    assert!(
        lost_at <= valid_until + TOLERANCE,
        "late by {:?}",
        lost_at - valid_until
    );

    // The work future was dropped: it makes no progress any more.
    let frozen = ticks.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        ticks.load(Ordering::SeqCst),
        frozen,
        "the critical section kept running"
    );
}

#[tokio::test]
async fn paused_majority_fires_the_loss_on_time_from_the_local_timer() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let guard = redlock
        .try_lock("frozen", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    // Let one renewal happen so that connections are established.
    let first = guard.valid_until();
    while guard.valid_until() == first {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _paused = [servers[0].pause(), servers[2].pause()];
    guard.lost().await;
    let lost_at = Instant::now();
    let valid_until = guard.valid_until();
    assert!(!guard.is_held());
    assert!(lost_at + Duration::from_millis(1) >= valid_until);
    assert!(
        lost_at <= valid_until + TOLERANCE,
        "late by {:?}",
        lost_at - valid_until
    );
}

#[tokio::test]
async fn killed_minority_and_a_node_restarted_empty_keep_the_lock_and_heal() {
    let mut servers = start_nodes(3);
    let redlock = watched(&servers);
    let ttl = Duration::from_millis(900);
    let guard = redlock.try_lock("heal-me", ttl).await.unwrap().unwrap();
    servers[0].kill();
    let until = Instant::now() + ttl * 2;
    while Instant::now() < until {
        assert!(guard.is_held(), "a minority down must not lose the lock");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // Back without its data: the watchdog puts our key there again.
    servers[0].restart();
    assert_eq!(get(&servers[0], "heal-me"), None);
    let deadline = Instant::now() + ttl * 4;
    while get(&servers[0], "heal-me").as_deref() != Some(guard.token()) {
        assert!(Instant::now() < deadline, "the restarted node was never healed");
        assert!(guard.is_held());
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(pttl(&servers[0], "heal-me") > 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn another_token_on_a_majority_fires_the_loss_at_the_next_tick() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let ttl = Duration::from_secs(3);
    let guard = redlock.try_lock("stolen", ttl).await.unwrap().unwrap();
    let overwritten_at = Instant::now();
    for server in &servers[1..] {
        set_foreign(server, "stolen", "someone-else", 30_000);
    }
    guard.lost().await;
    // A tick comes every ttl/3; the loss must not wait for the validity.
    assert!(
        overwritten_at.elapsed() < ttl / 3 + TOLERANCE * 2,
        "{:?}",
        overwritten_at.elapsed()
    );
    assert!(
        guard.remaining() > ttl / 3,
        "signalled by the tick, not the timer"
    );
    assert!(!guard.is_held());
    // The best-effort release is owner-checked: the other owner's keys stay.
    for server in &servers[1..] {
        assert_eq!(get(server, "stolen").as_deref(), Some("someone-else"));
    }
}

#[tokio::test]
async fn thousand_locks_cost_one_renewal_call_per_node_per_tick() {
    let servers = start_nodes(5);
    // A generous per-node timeout: a round that times out on a loaded
    // machine is retried, which adds ticks this test would count as cost.
    let redlock = builder(&servers)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(3);
    let mut guards = Vec::new();
    for batch in 0..10 {
        let attempts = (0..100).map(|i| redlock.try_lock(format!("item:{batch}:{i}"), ttl));
        for guard in futures::future::join_all(attempts).await {
            guards.push(guard.unwrap().unwrap());
        }
    }
    let before: Vec<u64> = servers.iter().map(|s| calls(s, "evalsha")).collect();
    let window = Duration::from_millis(2500);
    tokio::time::sleep(window).await;
    assert!(guards.iter().all(|g| g.is_held()));
    // Renewal every ttl/3 = 1 s; regular ticks are at least half a period
    // apart, so about 5 ticks in 2.5 s, plus the ticks cut by the window's
    // edges and a retry or two on a loaded machine; 1000 locks are 2 chunks.
    // One renewal per lock would be about 2,500 calls per node.
    let max_ticks = 2 * 3 + 4;
    let chunks = 2;
    for (server, before) in servers.iter().zip(before) {
        let renewals = calls(server, "evalsha") - before;
        println!(
            "node {}: {renewals} renewal script calls for 1000 locks in {window:?}",
            server.port()
        );
        assert!(renewals >= 2, "locks were renewed");
        assert!(
            renewals <= max_ticks * chunks,
            "{renewals} calls: renewal must cost O(nodes) per tick, not O(locks)"
        );
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn dropped_guards_stop_being_renewed() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let ttl = Duration::from_millis(600);
    let before: Vec<u64> = servers.iter().map(|s| calls(s, "evalsha")).collect();
    let guard = redlock.try_lock("dropped", ttl).await.unwrap().unwrap();
    drop(guard);
    tokio::time::sleep(ttl * 2).await;
    for (server, before) in servers.iter().zip(before) {
        // One script call: the release. No renewal ever ran.
        assert_eq!(calls(server, "evalsha") - before, 1);
        assert_eq!(dbsize(server), 0);
    }
}

#[tokio::test]
async fn without_auto_renew_the_lock_runs_out_and_the_holder_is_told() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let manual = redlock.with_options(redlock.options().auto_renew(false)).unwrap();
    let guard = manual
        .try_lock("short", Duration::from_millis(500))
        .await
        .unwrap()
        .unwrap();
    guard.lost().await;
    let lost_at = Instant::now();
    assert!(lost_at >= guard.valid_until());
    assert!(lost_at <= guard.valid_until() + TOLERANCE);
    all_empty(&servers, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn max_hold_stops_renewal_and_signals_the_loss() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let capped = redlock
        .with_options(redlock.options().max_hold(Duration::from_secs(1)))
        .unwrap();
    let ttl = Duration::from_millis(600);
    let started = Instant::now();
    let guard = capped.try_lock("capped", ttl).await.unwrap().unwrap();
    guard.lost().await;
    let held_for = started.elapsed();
    assert!(
        held_for >= Duration::from_secs(1),
        "renewed up to the cap: {held_for:?}"
    );
    assert!(
        held_for <= Duration::from_secs(1) + ttl + TOLERANCE,
        "then stopped: {held_for:?}"
    );
}

#[tokio::test]
async fn with_lock_releases_when_the_work_panics() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let task = tokio::spawn({
        let redlock = redlock.clone();
        async move {
            redlock
                .with_lock("panicky", Duration::from_secs(10), async |_guard| {
                    panic!("the critical section failed");
                })
                .await
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    all_empty(&servers, Duration::from_secs(5)).await;
    assert!(
        redlock
            .try_lock("panicky", Duration::from_secs(10))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn with_lock_returns_the_work_value_and_releases() {
    let servers = start_nodes(3);
    let redlock = watched(&servers);
    let value = redlock
        .with_lock("ok", Duration::from_secs(10), async |guard| {
            assert!(guard.is_held());
            guard.token().len()
        })
        .await
        .unwrap();
    assert_eq!(value, 32);
    // Released at a majority on return; the last node follows.
    all_empty(&servers, Duration::from_secs(5)).await;
}
