//! The edges of a client's life, against real redis-server nodes: a short
//! program that shuts its client down leaves no key behind, a cancelled
//! attempt is undone, and a client outlives the runtime that first used it.
//!
//! Each "program" here is a runtime of its own, built, used and dropped the
//! way a `#[tokio::main]` does it: what is not done when its `main` future
//! returns is never done.

use std::sync::OnceLock;
use std::time::Duration;

use quorumlock::{DEFAULT_SHUTDOWN_TIMEOUT, Error, Redlock};
use quorumlock_testkit::{
    Proxy, RedisServer, builder, calls, client, dbsize, eventually, get, int, leftovers, set_foreign,
    start_nodes, warm_up,
};

/// The foreign owner's token in the refused-attempt tests.
const FOREIGN: &str = "another-owner";

/// A `#[tokio::main]`-like program: a fresh runtime that runs `main` and is
/// dropped when it returns, with whatever it spawned.
fn program<T>(main: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(main)
}

/// What `node` holds besides the foreign owner's lock on `key`: our
/// leftovers.
fn ours(node: &RedisServer, key: &str) -> Option<String> {
    match get(node, key) {
        Some(value) if value == FOREIGN => (dbsize(node) > 1).then(|| "another key".to_owned()),
        Some(value) => Some(value),
        None => (dbsize(node) > 0).then(|| "another key".to_owned()),
    }
}

#[test]
fn a_program_that_shuts_down_after_a_refused_try_lock_leaves_no_key() {
    let nodes = start_nodes(5);
    // Every set of nodes held by another owner: refused where a majority
    // holds it, taken (and released) otherwise.
    for mask in 0u32..32 {
        for (i, node) in nodes.iter().enumerate() {
            assert_eq!(node.command(&["FLUSHALL"]).expect("FLUSHALL").trim(), "+OK");
            if mask & (1 << i) != 0 {
                set_foreign(node, "k", FOREIGN, 20_000);
            }
        }
        let refused = program(async {
            let redlock = client(&nodes);
            let outcome = redlock.try_lock("k", Duration::from_secs(20)).await;
            let refused = match outcome {
                Ok(Some(guard)) => {
                    guard.release().await.expect("release");
                    false
                }
                Ok(None) => true,
                Err(error) => panic!("mask {mask:05b}: {error}"),
            };
            let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
            assert!(report.is_complete(), "mask {mask:05b}: {report}");
            refused
        });
        assert_eq!(refused, mask.count_ones() >= 3, "mask {mask:05b}");
        let left: Vec<_> = nodes.iter().map(|node| ours(node, "k")).collect();
        assert!(
            left.iter().all(Option::is_none),
            "mask {mask:05b}: keys of ours left right after the program ended: {left:?}"
        );
    }
}

#[test]
fn a_guard_dropped_before_shutdown_is_released() {
    let nodes = start_nodes(3);
    program(async {
        let redlock = client(&nodes);
        let guard = redlock
            .lock("dropped", Duration::from_secs(30))
            .await
            .expect("lock");
        drop(guard);
        let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
        assert!(report.is_complete(), "{report}");
        // The drop released it, not the shutdown.
        assert_eq!(report.released, 0);
    });
    let sizes: Vec<i64> = nodes.iter().map(dbsize).collect();
    assert_eq!(sizes, [0, 0, 0], "keys left right after the program ended");
}

#[test]
fn shutdown_releases_the_locks_still_held_and_closes_the_client() {
    let nodes = start_nodes(3);
    program(async {
        let redlock = client(&nodes);
        let renewed = redlock
            .lock("held:renewed", Duration::from_secs(30))
            .await
            .expect("lock");
        let manual = redlock
            .with_options(redlock.options().auto_renew(false))
            .expect("options");
        let plain = manual
            .lock(["held:a", "held:b"], Duration::from_secs(30))
            .await
            .expect("lock");
        let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
        assert!(report.is_complete(), "{report}");
        assert_eq!(report.released, 2, "{report}");
        for node in &nodes {
            assert_eq!(dbsize(node), 0, "port {}: keys left after shutdown", node.port());
        }
        // Holders learn that their lock is gone, and the client takes no new one.
        tokio::time::timeout(Duration::from_secs(1), renewed.lost())
            .await
            .expect("the loss signal fired");
        assert!(!plain.is_held());
        assert!(matches!(renewed.release().await, Err(Error::Closed)));
        assert!(matches!(
            manual.try_lock("after", Duration::from_secs(5)).await,
            Err(Error::Closed)
        ));
        assert!(matches!(
            redlock.lock("after", Duration::from_secs(5)).await,
            Err(Error::Closed)
        ));
        drop(plain);
    });
    for node in &nodes {
        assert_eq!(dbsize(node), 0, "port {}: keys left", node.port());
    }
}

/// A waiter whose own task never runs again before its program exits (here:
/// a future that is not polled again) is taken off the queues by the
/// shutdown itself.
#[test]
fn a_shutdown_takes_waiters_off_the_queues_and_ends_their_wait() {
    let nodes = start_nodes(3);
    for node in &nodes {
        set_foreign(node, "busy", FOREIGN, 30_000);
    }
    program(async {
        let redlock = client(&nodes);
        let wait = redlock.lock("busy", Duration::from_secs(10));
        tokio::pin!(wait);
        // Queued on every node: the waiter's attempt queues it where the
        // resource is held.
        let queued = eventually(
            "the waiter is queued on every node",
            Duration::from_secs(5),
            || {
                nodes
                    .iter()
                    .all(|n| int(n, &["EXISTS", "quorumlock:waiters:{busy}"]) == 1)
            },
        );
        tokio::select! {
            outcome = &mut wait => panic!("the wait ended early: {outcome:?}"),
            () = queued => {}
        }
        let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
        assert!(report.is_complete(), "{report}");
        for node in &nodes {
            assert_eq!(
                dbsize(node),
                1,
                "port {}: only the foreign lock is left: {}",
                node.port(),
                leftovers(node)
            );
        }
        let outcome = tokio::time::timeout(Duration::from_secs(1), wait)
            .await
            .expect("the wait ended with the shutdown");
        assert!(matches!(outcome, Err(Error::Closed)), "{outcome:?}");
    });
    for node in &nodes {
        assert_eq!(get(node, "busy").as_deref(), Some(FOREIGN));
    }
}

/// The proxies' delay each way in the cancelled-attempt test: a SET reaches
/// its node this long after it was sent, and its reply comes as long again,
/// so the caller can give up in between, even on a loaded machine.
const CANCEL_LATENCY: Duration = Duration::from_secs(1);

/// A caller gives up on an attempt while its SETs are on their way (a
/// timeout, a `select!`): they land after the caller left, and the undo sent
/// behind them deletes them.
#[test]
fn a_cancelled_attempt_leaves_no_key() {
    let nodes = start_nodes(3);
    let sets = || nodes.iter().map(|n| calls(n, "set")).collect::<Vec<_>>();
    program(async {
        let proxies: Vec<Proxy> = nodes.iter().map(|n| Proxy::start(n.port())).collect();
        let redlock = Redlock::builder()
            .nodes(proxies.iter().map(Proxy::url))
            .node_timeout(CANCEL_LATENCY * 3)
            .build()
            .expect("config");
        // Every node's connection is open before the delay: a handshake
        // through it would not finish within the connect timeout.
        warm_up(&redlock).await;
        for proxy in &proxies {
            proxy.set_latency(CANCEL_LATENCY);
        }
        for round in 0..3 {
            let before = sets();
            let key = format!("cancelled:{round}");
            {
                let attempt = redlock.try_lock(&key, Duration::from_secs(30));
                tokio::pin!(attempt);
                let landed = eventually("the SET reached every node", Duration::from_secs(5), || {
                    sets().iter().zip(&before).all(|(now, then)| now > then)
                });
                tokio::select! {
                    outcome = &mut attempt => panic!(
                        "the attempt ended before its SETs landed on every node ({:?} set calls before, {:?} now): {outcome:?}",
                        before,
                        sets()
                    ),
                    () = landed => {}
                }
            }
            // Cancelled: the keys are set on every node, and nobody holds a
            // guard. The undo, sent behind the SETs, deletes them; the next
            // round starts after that, so that its SETs do not queue behind
            // this round's undo on a node (they would then be sent as a
            // batch once the undo's reply is back, land late, and the
            // attempt could finish on the other nodes first).
            eventually(
                "the undo deleted the round's keys",
                Duration::from_secs(10),
                || nodes.iter().all(|node| get(node, &key).is_none()),
            )
            .await;
        }
        // The undo's round trip through the proxies takes twice the latency.
        let report = redlock.shutdown(Duration::from_secs(10)).await;
        assert!(report.is_complete(), "{report}");
    });
    for node in &nodes {
        assert_eq!(dbsize(node), 0, "port {}: {}", node.port(), leftovers(node));
    }
}

/// One client in a `static`, used by one runtime after another (one per
/// `#[tokio::test]`, one per job): its watchdog, batches and connections
/// started on a runtime that is gone must not stall it.
#[test]
fn a_static_client_outlives_the_runtime_that_first_used_it() {
    static CLIENT: OnceLock<Redlock> = OnceLock::new();
    let nodes = start_nodes(3);
    let redlock = CLIENT.get_or_init(|| {
        builder(&nodes)
            .node_timeout(Duration::from_millis(200))
            .build()
            .expect("config")
    });
    let ttl = Duration::from_millis(900);
    // Runtime A: renewed locks (the watchdog runs there) and enough
    // concurrent requests that batches are in flight when A is dropped.
    let runtime_a = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime_a.block_on(async {
        let _held = redlock.lock("static:a", ttl).await.expect("lock on runtime A");
        for task in 0..64 {
            tokio::spawn(async move {
                loop {
                    if let Ok(Some(guard)) = redlock.try_lock(format!("static:busy:{task}"), ttl).await {
                        let _ = guard.release().await;
                    }
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::mem::forget(_held);
    });
    drop(runtime_a);
    // Runtime B: the same client takes a lock and keeps it for 3 ttls.
    program(async {
        let guard = tokio::time::timeout(Duration::from_secs(5), redlock.try_lock("static:b", ttl))
            .await
            .expect("no request waits on runtime A's tasks")
            .expect("the first request on runtime B reconnects")
            .expect("the key is free");
        let token = guard.token().to_owned();
        tokio::time::sleep(ttl * 3).await;
        assert!(guard.is_held(), "renewed on runtime B");
        for node in &nodes {
            assert_eq!(get(node, "static:b"), Some(token.clone()), "port {}", node.port());
        }
        guard.release().await.expect("release");
        let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
        assert!(report.is_complete(), "{report}");
    });
}

/// A lock whose renewals cannot reach a majority is lost; the node that
/// still renewed it must then be told to let it go (whoever saw the loss
/// first: the holder's own timer or the watchdog).
#[test]
fn a_lost_lock_is_released_where_it_was_still_renewed() {
    let nodes = start_nodes(3);
    program(async {
        let proxies: Vec<Proxy> = nodes.iter().map(|n| Proxy::start(n.port())).collect();
        let redlock = Redlock::builder()
            .nodes(proxies.iter().map(Proxy::url))
            .node_timeout(Duration::from_millis(100))
            .build()
            .expect("config");
        let ttl = Duration::from_secs(2);
        let guard = redlock.lock("lost", ttl).await.expect("lock");
        proxies[1].black_hole();
        proxies[2].black_hole();
        // The holder waits for the loss, so its timer may fire first.
        tokio::time::timeout(ttl * 2, guard.lost())
            .await
            .expect("the loss fired");
        // Node 0 renewed the key until the loss; it must be gone well before
        // its ttl would have run out.
        eventually("the key is released on node 0", ttl / 2, || {
            dbsize(&nodes[0]) == 0
        })
        .await;
        drop(guard);
        let _ = redlock.shutdown(Duration::from_millis(500)).await;
    });
}
