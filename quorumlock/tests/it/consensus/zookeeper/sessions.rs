//! What only a ZooKeeper lock does: its session bounds it (a paused holder
//! finds it lost), its line is of sequential nodes (an attempt dropped
//! mid-create leaves none), the URL's chroot keeps locks apart, and the
//! settings a session or a znode path cannot take are config errors.

use std::time::Duration;

use quorumlock::{Error, Setting};
use quorumlock_testkit::eventually;
use quorumlock_testkit::zookeeper::ZkEnsemble;

use crate::consensus::store::Space;
use crate::consensus::{LOOK_WITHIN, TTL, ms, take_once_freed};

/// A holder whose process stops (a stop-the-world pause: here its runtime
/// is simply not driven) past its session timeout: the ensemble expires its
/// session, another client takes the lock, and the holder, when it runs
/// again, finds its lock not held and its loss signalled, with a smaller
/// fencing token than the new holder's, whatever its ttl.
#[test]
fn a_holder_paused_past_its_session_timeout_finds_the_lock_lost() {
    let space = Space::<ZkEnsemble>::shared("frozen");
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (paused, running) = (runtime(), runtime());
    let holder = paused.block_on(async { space.client() });
    // A ttl far beyond the session timeout: the session bounds the validity.
    let guard = paused
        .block_on(holder.try_lock("frozen", Duration::from_secs(10)))
        .unwrap()
        .expect("free");
    // From here on nothing drives the holder's runtime: no heartbeat, no
    // ping of its session.
    let taken = running.block_on(take_once_freed(&space.client(), "frozen"));
    assert!(!guard.is_held(), "the paused holder still counts on its lock");
    paused.block_on(guard.lost());
    assert!(taken.fence_token() > guard.fence_token());
    running.block_on(taken.release()).unwrap();
}

/// An attempt dropped at any point (here by a timeout, at every moment of
/// its first milliseconds, its create among them) leaves no node behind: a
/// node it made without learning of it would hold up the line until its
/// session ends.
// Blocking looks at the store: see `conformance_suite!`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_dropped_at_any_point_leaves_no_node() {
    let space = Space::<ZkEnsemble>::shared("dropped");
    let redlock = space.client();
    // The session first, so that the timeouts below fall inside attempts.
    drop(redlock.try_lock("warm", TTL).await.unwrap());
    for micros in (0..6000).step_by(150) {
        let attempt = redlock.lock("dropped", TTL);
        if let Ok(taken) = tokio::time::timeout(Duration::from_micros(micros), attempt).await {
            taken.unwrap().release().await.unwrap();
        }
    }
    eventually("every dropped attempt's node deleted", LOOK_WITHIN, || {
        space.line("dropped").is_empty()
    })
    .await;
    assert!(space.client().try_lock("dropped", TTL).await.unwrap().is_some());
}

// Blocking looks at the store: see `conformance_suite!`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chroot_in_the_url_keeps_locks_apart() {
    let space = Space::<ZkEnsemble>::shared("chroot");
    let in_app = |app: &str| {
        let url = format!("{}/apps/{app}?session_timeout=2s", space.steady_url());
        quorumlock::Redlock::builder().node(url).build().unwrap()
    };
    let (a, b) = (in_app("a"), in_app("b"));
    let held = a.try_lock("job", TTL).await.unwrap().expect("free");
    assert!(b.try_lock("job", TTL).await.unwrap().is_some(), "another chroot");
    assert_eq!(space.line("apps/a/job").len(), 1);
    held.release().await.unwrap();
}

/// Settings an etcd lock takes and a ZooKeeper lock cannot: a ttl that
/// leaves no validity after one request's timeout and the drift (etcd
/// rounds it up to a whole second), and a resource that is no znode path.
#[tokio::test]
async fn a_ttl_shorter_than_one_request_and_a_resource_that_is_no_znode_path_are_config_errors() {
    let redlock = Space::<ZkEnsemble>::shared("zk-settings").client();
    match redlock.try_lock("r", ms(400)).await {
        Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::Ttl),
        other => panic!("ttl 400 ms: expected a config error, got {other:?}"),
    }
    match redlock.try_lock("a//b", TTL).await {
        Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::Resources),
        other => panic!("expected a config error, got {other:?}"),
    }
}
