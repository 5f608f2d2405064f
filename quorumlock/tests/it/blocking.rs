//! The blocking client (feature `blocking`) against real redis-server nodes:
//! exclusion, waiting, renewal while the caller's thread is busy, loss
//! reporting, background release on drop, and refusal inside a runtime.

use std::time::{Duration, Instant};

use quorumlock::blocking::{Guard, Redlock};
use quorumlock::{Error, Setting};
use quorumlock_testkit::{Proxy, RedisServer, builder, dbsize, get, pttl, set_foreign, start_nodes};

fn client(nodes: &[RedisServer]) -> Redlock {
    builder(nodes).build_blocking().expect("valid test config")
}

/// Polls `condition` every 10 ms until it holds, at most `limit`.
fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Redlock>();
    check::<Guard>();
}

#[test]
fn try_lock_excludes_another_client_until_released() {
    let nodes = start_nodes(3);
    let (a, b) = (client(&nodes), client(&nodes));
    let ttl = Duration::from_secs(5);
    let guard = a.try_lock("blocking:excl", ttl).unwrap().expect("free");
    assert!(guard.is_held());
    assert!(guard.valid_until() > Instant::now());
    // try_lock returns at a majority; the last node's SET may still be on its way.
    let holders = nodes
        .iter()
        .filter(|n| get(n, "blocking:excl").as_deref() == Some(guard.token()))
        .count();
    assert!(holders >= 2, "a majority holds our token: {holders}");
    assert!(b.try_lock("blocking:excl", ttl).unwrap().is_none(), "held by a");
    let report = guard.release().unwrap();
    assert!(report.deleted >= 2, "a majority deleted our key: {report:?}");
    b.try_lock("blocking:excl", ttl)
        .unwrap()
        .expect("free again")
        .release()
        .unwrap();
}

#[test]
fn lock_waits_for_a_release_on_another_thread() {
    let nodes = start_nodes(3);
    let (a, b) = (client(&nodes), client(&nodes));
    let guard = a.lock("blocking:wait", Duration::from_secs(5)).unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        guard.release().unwrap();
    });
    let start = Instant::now();
    let second = b.lock("blocking:wait", Duration::from_secs(5)).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(250));
    holder.join().unwrap();
    second.release().unwrap();
}

#[test]
fn the_watchdog_renews_while_the_callers_thread_is_busy() {
    let nodes = start_nodes(3);
    let (a, b) = (client(&nodes), client(&nodes));
    let ttl = Duration::from_secs(1);
    let value = a
        .with_lock("blocking:busy", ttl, |guard| {
            // Busy outside any runtime call for 2.5 ttls.
            std::thread::sleep(ttl * 5 / 2);
            assert!(guard.is_held(), "renewed in the background");
            assert!(pttl(&nodes[0], "blocking:busy") > 0);
            assert!(b.try_lock("blocking:busy", ttl).unwrap().is_none());
            "done"
        })
        .unwrap();
    assert_eq!(value, "done");
    // The release returned at a majority; the last node follows.
    assert!(
        eventually(Duration::from_secs(5), || nodes.iter().all(|n| dbsize(n) == 0)),
        "released after the work"
    );
}

#[test]
fn with_lock_reports_a_loss_during_the_work() {
    let mut nodes = start_nodes(3);
    let redlock = client(&nodes);
    let ttl = Duration::from_secs(1);
    let victims = &mut nodes[..2];
    let outcome = redlock.with_lock("blocking:lost", ttl, |guard| {
        for node in victims.iter_mut() {
            node.kill();
        }
        // A synchronous closure is not interrupted: it watches the guard.
        assert!(guard.wait_lost(ttl * 3).unwrap(), "loss signalled");
        assert!(!guard.is_held());
        42
    });
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
}

#[test]
fn dropping_a_guard_releases_the_lock() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes);
    // lock() returns at a majority, and a drop once a majority confirmed the
    // release: the last node may follow a moment later either way.
    let holding = |key: &str| nodes.iter().filter(|n| get(n, key).is_some()).count();
    let guard = redlock.lock("blocking:drop", Duration::from_secs(30)).unwrap();
    assert!(holding("blocking:drop") >= 2, "a majority holds the lock");
    {
        let _scoped = redlock.lock("blocking:scoped", Duration::from_secs(30)).unwrap();
        assert!(
            holding("blocking:scoped") >= 2,
            "a majority holds the scoped lock"
        );
    }
    assert!(
        holding("blocking:scoped") <= 1,
        "released by a majority at the end of its scope"
    );
    assert!(holding("blocking:drop") >= 2, "the other lock is still held");
    drop(guard);
    assert!(
        holding("blocking:drop") <= 1,
        "the drop released a majority before returning"
    );
    assert!(
        eventually(Duration::from_secs(5), || nodes.iter().all(|n| dbsize(n) == 0)),
        "every node released"
    );
}

#[test]
fn extend_moves_the_validity() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes)
        .with_options(quorumlock::LockOptions::new().auto_renew(false))
        .unwrap();
    let mut guard = redlock.lock("blocking:extend", Duration::from_secs(2)).unwrap();
    let before = guard.valid_until();
    guard.extend(Duration::from_secs(20)).unwrap();
    assert!(guard.valid_until() > before + Duration::from_secs(10));
    // extend returns at a majority; the last node may still be on its way.
    let extended = nodes
        .iter()
        .filter(|n| pttl(n, "blocking:extend") > 10_000)
        .count();
    assert!(extended >= 2, "a majority has the new ttl: {extended}");
    assert!(!guard.wait_lost(Duration::from_millis(50)).unwrap());
    guard.release().unwrap();
}

#[test]
fn calls_from_inside_a_runtime_are_config_errors() {
    let nodes = start_nodes(1);
    let redlock = client(&nodes);
    let outside = redlock.lock("blocking:rt", Duration::from_secs(5)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let error = redlock
            .try_lock("blocking:other", Duration::from_secs(5))
            .unwrap_err();
        assert!(
            matches!(error, Error::Config(ref e) if e.setting() == Setting::Runtime && e.message().contains("inside a Tokio runtime")),
            "{error}"
        );
        assert!(matches!(outside.wait_lost(Duration::ZERO), Err(Error::Config(_))));
        // Inside async code the drop releases in the background.
        drop(outside);
    });
    assert!(
        eventually(Duration::from_secs(5), || dbsize(&nodes[0]) == 0),
        "the guard dropped in async code was released"
    );
    // Dropping the last handle of a client (its runtime) in async code must not panic.
    runtime.block_on(async move { drop(redlock) });
}

/// A refused attempt leaves its keys on the nodes that granted them to a
/// background release; the client's drop waits for it (bounded), so a
/// program that drops its client and exits leaves nothing of its own. The
/// free nodes are 150 ms away each way, so that the release is still on its
/// way when the client is dropped.
#[test]
fn dropping_the_client_finishes_its_background_releases() {
    let nodes = start_nodes(5);
    for node in &nodes[..3] {
        set_foreign(node, "refused", "another-owner", 20_000);
    }
    let proxy_runtime = tokio::runtime::Runtime::new().expect("runtime");
    let proxies: Vec<Proxy> = proxy_runtime.block_on(async {
        nodes[3..]
            .iter()
            .map(|node| {
                let proxy = Proxy::start(node.port());
                proxy.set_latency(Duration::from_millis(150));
                proxy
            })
            .collect()
    });
    let urls = quorumlock_testkit::urls(&nodes[..3])
        .into_iter()
        .chain(proxies.iter().map(Proxy::url));
    let redlock = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(500))
        .build_blocking()
        .expect("config");
    assert!(
        redlock
            .try_lock("refused", Duration::from_secs(20))
            .expect("nodes up")
            .is_none()
    );
    drop(redlock);
    for node in &nodes[3..] {
        assert_eq!(dbsize(node), 0, "port {}: a key of ours is left", node.port());
    }
}

#[test]
fn shutdown_releases_a_held_lock_and_closes_the_client() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes);
    let guard = redlock.lock("held", Duration::from_secs(30)).expect("lock");
    let report = redlock
        .shutdown(quorumlock::DEFAULT_SHUTDOWN_TIMEOUT)
        .expect("outside a runtime");
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.released, 1);
    assert!(nodes.iter().all(|n| dbsize(n) == 0), "keys left after shutdown");
    assert!(!guard.is_held());
    assert!(matches!(
        redlock.try_lock("other", Duration::from_secs(5)),
        Err(Error::Closed)
    ));
}

#[test]
fn with_lock_never_calls_the_work_once_the_validity_passed() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes);
    let ttl = Duration::from_secs(1);
    // The caller's thread (which runs the acquisition) held up past the
    // validity right after the lock was taken.
    let stall = std::sync::Arc::new(quorumlock_testkit::stall::StallOnEvent::new(
        "lock acquired",
        ttl + ttl / 4,
    ));
    let mut ran = false;
    let outcome = {
        let _default = tracing::subscriber::set_default(std::sync::Arc::clone(&stall));
        redlock.with_lock("blocking:start", ttl, |_| ran = true)
    };
    assert!(stall.stalled(), "the acquisition emitted its event");
    assert!(!ran, "the work was called on a lapsed lock");
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
}
