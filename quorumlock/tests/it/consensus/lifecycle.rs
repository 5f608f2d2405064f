//! Around the lock: inspect and unlock, shutdown, the minimum hold, and
//! the settings a consensus store refuses as config errors.

use std::time::Duration;

use quorumlock::{Error, IdempotencyError, LockOptions, Redlock, RedlockBuilder, Setting, Verdict};

use super::TTL;
use super::store::{Space, Store};

pub async fn inspect_and_unlock_see_the_holder_and_free_the_lock<S: Store>() {
    let space = Space::<S>::shared("inspect");
    let redlock = space.client();
    let guard = redlock.try_lock("report", TTL).await.unwrap().expect("free");
    let inspection = redlock.inspect("report").await.unwrap();
    match &inspection.verdict {
        Verdict::Held { token, valid_for, .. } => {
            assert_eq!(token, guard.token());
            assert!(*valid_for <= TTL, "{valid_for:?}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(
        redlock.unlock("report", "not-the-token").await.unwrap().deleted(),
        0
    );
    assert_eq!(
        redlock.unlock("report", guard.token()).await.unwrap().deleted(),
        1
    );
    assert!(matches!(
        redlock.inspect("report").await.unwrap().verdict,
        Verdict::Free
    ));
    // Its next renewal finds its entry gone.
    guard.lost().await;
    assert_eq!(redlock.force_unlock("report").await.unwrap().deleted(), 0);
}

pub async fn shutdown_gives_back_every_lock_and_takes_no_new_one<S: Store>() {
    let space = Space::<S>::shared("shutdown");
    let redlock = space.client();
    let guards = [
        redlock.try_lock("s/1", TTL).await.unwrap().unwrap(),
        redlock.try_lock("s/2", TTL).await.unwrap().unwrap(),
    ];
    let report = redlock.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.released, 2);
    assert!(report.is_complete(), "{report}");
    let left = space.leftovers();
    assert!(left.is_empty(), "{left:?}");
    for guard in guards {
        assert!(!guard.is_held());
        assert!(matches!(guard.release().await, Err(Error::Closed)));
    }
    assert!(matches!(redlock.try_lock("s/3", TTL).await, Err(Error::Closed)));
}

/// A minimum hold is kept where the store can keep a lock past its client
/// (an etcd lease), and refused up front where it cannot (a ZooKeeper
/// node ends with its session): never silently ignored.
pub async fn a_minimum_hold_keeps_a_released_lock_until_it_passes_or_is_refused_up_front<S: Store>() {
    let space = Space::<S>::shared("min-hold");
    let options = LockOptions::new()
        .min_hold(Duration::from_secs(3))
        .auto_renew(false);
    let a = space.client().with_options(options).unwrap();
    let Some(slack) = S::MIN_HOLD_SLACK else {
        match a.try_lock("nightly", TTL).await {
            Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::MinHold),
            other => panic!("expected a config error, got {other:?}"),
        }
        return;
    };
    let guard = a.try_lock("nightly", TTL).await.unwrap().expect("free");
    let report = guard.release().await.unwrap();
    let kept_until = report.kept_until.expect("kept");
    assert_eq!(report.kept, 1);
    let b = space.client();
    assert!(
        b.try_lock("nightly", TTL).await.unwrap().is_none(),
        "kept past the ttl"
    );
    tokio::time::sleep_until(kept_until + slack).await;
    assert!(
        b.try_lock("nightly", TTL).await.unwrap().is_some(),
        "free once it passed"
    );
}

/// The setting a builder's error names.
fn refused_setting(result: quorumlock::Result<Redlock>) -> Setting {
    match result {
        Err(Error::Config(e)) => e.setting(),
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// `S`'s URL scheme in front of `rest`.
fn url<S: Store>(rest: &str) -> String {
    format!("{}://{rest}", S::SCHEME)
}

pub async fn bad_settings_are_config_errors_that_say_which<S: Store>() {
    let mixed = Redlock::builder()
        .nodes([url::<S>("127.0.0.1:1"), "redis://127.0.0.1:2".into()])
        .build();
    assert_eq!(refused_setting(mixed), Setting::Nodes);
    let acked = Redlock::builder()
        .node(url::<S>("127.0.0.1:1"))
        .replica_ack(quorumlock::ReplicaAck::new(1))
        .build();
    assert_eq!(refused_setting(acked), Setting::ReplicaAck);
    let no_port = Redlock::builder().node(url::<S>("127.0.0.1")).build();
    assert_eq!(refused_setting(no_port), Setting::Nodes);
    let split = Redlock::builder()
        .nodes([url::<S>("127.0.0.1:1"), "127.0.0.1:2/app".into()])
        .build()
        .unwrap();
    assert_eq!(split.nodes(), 1, "one {} store", S::NAME);
    let redlock = Space::<S>::shared("settings").client();
    for ttl in [Duration::ZERO, Duration::from_secs(366 * 24 * 60 * 60)] {
        match redlock.try_lock("r", ttl).await {
            Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::Ttl),
            other => panic!("ttl {ttl:?}: expected a config error, got {other:?}"),
        }
    }
    match redlock
        .idempotency()
        .run("k", TTL, || async { Ok::<_, std::io::Error>("x") })
        .await
    {
        Err(IdempotencyError::Lock(Error::Config(e))) => assert_eq!(e.setting(), Setting::Nodes),
        other => panic!("expected a config error, got {other:?}"),
    }
}

pub fn settings_of_redis_nodes_are_refused_on_a_cluster<S: Store>() {
    let cluster = || Redlock::builder().node(url::<S>("127.0.0.1:1"));
    let refused = |builder: RedlockBuilder| refused_setting(builder.build());
    assert_eq!(refused(cluster().heal(true)), Setting::Heal);
    assert_eq!(refused(cluster().batching(false)), Setting::Batching);
    assert_eq!(
        refused(cluster().replica_ack(quorumlock::ReplicaAck::new(1))),
        Setting::ReplicaAck
    );
    assert!(cluster().node_timeout(Duration::from_secs(1)).build().is_ok());
}
