//! The lock's API on one etcd member: exclusion, renewal, extend, release,
//! waiting, fencing, multi-resource locks, the minimum hold, inspection,
//! shutdown, and the errors a caller can act on.

use std::time::Duration;

use quorumlock::{Error, IdempotencyError, LockOptions, Redlock, Setting, Verdict};
use quorumlock_testkit::etcd::EtcdCluster;
use quorumlock_testkit::eventually;
use tokio::time::Instant;

use super::{TTL, ms};

fn client(cluster: &EtcdCluster) -> Redlock {
    Redlock::builder()
        .node(cluster.url())
        .build()
        .expect("etcd client")
}

#[tokio::test]
async fn a_lock_is_exclusive_outlives_its_ttl_when_renewed_and_is_gone_after_release() {
    let cluster = EtcdCluster::start(1);
    let (a, b) = (client(&cluster), client(&cluster));
    let mut guard = a.try_lock("orders/42", TTL).await.unwrap().expect("free");
    assert!(guard.fence_token().is_some(), "etcd locks are always fenced");
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_none(), "held by a");
    assert_eq!(
        cluster.keys("orders/42/").len(),
        1,
        "a refused try_lock joins no line"
    );
    // Twice the ttl: only the keep-alives keep it.
    tokio::time::sleep(TTL * 2).await;
    assert!(guard.is_held(), "renewed: {:?} left", guard.remaining());
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_none());
    guard.extend(Duration::from_secs(4)).await.unwrap();
    assert!(
        guard.remaining() > Duration::from_secs(3),
        "{:?}",
        guard.remaining()
    );
    let report = guard.release().await.unwrap();
    assert_eq!(
        (report.confirmed, report.deleted, report.kept_until),
        (1, 1, None)
    );
    assert!(cluster.keys("orders/42/").is_empty());
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_some());
    assert!(b.shutdown(Duration::from_secs(2)).await.is_complete());
    assert!(cluster.keys("").is_empty(), "{:?}", cluster.keys(""));
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_and_gets_a_larger_fence_token() {
    let cluster = EtcdCluster::start(1);
    let (a, b) = (client(&cluster), client(&cluster));
    let first = a.lock("stock/sku-1", TTL).await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = b.lock("stock/sku-1", TTL).await.unwrap();
        (Instant::now(), guard.fence_token(), guard)
    });
    // The waiter is in line: its key is the second under the prefix.
    eventually("the waiter queued", Duration::from_secs(5), || {
        cluster.keys("stock/sku-1/").len() == 2
    })
    .await;
    let token = first.fence_token().unwrap();
    let released = Instant::now();
    first.release().await.unwrap();
    let (acquired, fence, second) = waiting.await.unwrap();
    assert!(acquired >= released);
    assert!(fence.unwrap() > token, "{fence:?} after {token}");
    second.release().await.unwrap();
}

/// A waiter whose key vanished while it waited (its lease lapsed in a
/// failover, or an operator deleted it) must not take the lock when its
/// predecessor goes: it would hold it with no key, beside whoever comes next.
#[tokio::test]
async fn a_waiter_whose_key_vanished_takes_its_place_again_before_it_holds() {
    let cluster = EtcdCluster::start(1);
    let (a, b, c) = (client(&cluster), client(&cluster), client(&cluster));
    let first = a.lock("till", TTL).await.unwrap();
    let holder_key = cluster.keys("till/");
    let waiting = tokio::spawn(async move { b.lock("till", TTL).await.unwrap() });
    eventually("the waiter queued", Duration::from_secs(5), || {
        cluster.keys("till/").len() == 2
    })
    .await;
    let waiter_key = cluster
        .keys("till/")
        .into_iter()
        .find(|k| !holder_key.contains(k))
        .unwrap();
    cluster.etcdctl(&["del", &waiter_key]).unwrap();
    first.release().await.unwrap();
    let second = waiting.await.unwrap();
    // `second` says it holds the lock: then nobody else may take it.
    assert!(second.is_held());
    assert!(
        c.try_lock("till", TTL).await.unwrap().is_none(),
        "two holders at once"
    );
    assert_eq!(
        cluster.keys("till/").len(),
        1,
        "the waiter holds with a key of its own"
    );
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_gives_up_when_its_wait_runs_out_and_leaves_nothing() {
    let cluster = EtcdCluster::start(1);
    let holder = client(&cluster);
    let guard = holder.lock("job", TTL).await.unwrap();
    let waiter = client(&cluster)
        .with_options(LockOptions::new().wait(ms(300)))
        .unwrap();
    let started = Instant::now();
    match waiter.lock("job", TTL).await {
        Err(Error::Held { .. }) => {}
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(started.elapsed() >= ms(300));
    assert!(waiter.shutdown(Duration::from_secs(2)).await.is_complete());
    assert_eq!(cluster.keys("job/").len(), 1, "only the holder's key is left");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_holder_cut_off_from_etcd_hears_of_the_loss_before_its_lease_can_expire() {
    let cluster = EtcdCluster::start(1);
    let redlock = client(&cluster);
    let guard = redlock.try_lock("paused", TTL).await.unwrap().expect("free");
    let paused = cluster.pause(0);
    guard.lost().await;
    let signalled = Instant::now();
    // The lease's clock on the member started when it got our last
    // keep-alive, after we sent it; our validity ended before.
    assert!(signalled >= guard.valid_until());
    assert!(!guard.is_held());
    paused.resume();
    // The member expires the lease by itself, and the lock is free again.
    let other = client(&cluster);
    let mut taken = None;
    for _ in 0..50 {
        taken = other.try_lock("paused", TTL).await.unwrap();
        if taken.is_some() {
            break;
        }
        tokio::time::sleep(ms(100)).await;
    }
    let taken = taken.expect("the lease expired");
    assert!(taken.fence_token() > guard.fence_token());
}

#[tokio::test]
async fn a_multi_resource_lock_is_all_or_nothing() {
    let cluster = EtcdCluster::start(1);
    let (a, b) = (client(&cluster), client(&cluster));
    let both = a
        .try_lock(["acct/1", "acct/2"], TTL)
        .await
        .unwrap()
        .expect("free");
    assert!(b.try_lock("acct/2", TTL).await.unwrap().is_none());
    assert!(b.try_lock(["acct/3", "acct/2"], TTL).await.unwrap().is_none());
    assert!(b.shutdown(Duration::from_secs(2)).await.is_complete());
    assert!(
        cluster.keys("acct/3/").is_empty(),
        "the refused attempt left nothing"
    );
    both.release().await.unwrap();
    assert!(cluster.keys("acct/").is_empty());
}

#[tokio::test]
async fn a_release_inside_the_minimum_hold_keeps_the_lock_until_it_passes() {
    let cluster = EtcdCluster::start(1);
    let options = LockOptions::new()
        .min_hold(Duration::from_secs(3))
        .auto_renew(false);
    let a = client(&cluster).with_options(options).unwrap();
    let guard = a.try_lock("nightly", TTL).await.unwrap().expect("free");
    let report = guard.release().await.unwrap();
    let kept_until = report.kept_until.expect("kept");
    assert_eq!(report.kept, 1);
    let b = client(&cluster);
    assert!(
        b.try_lock("nightly", TTL).await.unwrap().is_none(),
        "kept past the ttl"
    );
    tokio::time::sleep_until(kept_until + ms(1500)).await;
    assert!(
        b.try_lock("nightly", TTL).await.unwrap().is_some(),
        "free once it passed"
    );
}

#[tokio::test]
async fn inspect_and_unlock_see_the_holder_and_free_the_lock() {
    let cluster = EtcdCluster::start(1);
    let redlock = client(&cluster);
    let guard = redlock.try_lock("report", TTL).await.unwrap().expect("free");
    let inspection = redlock.inspect("report").await.unwrap();
    match &inspection.verdict {
        Verdict::Held { token, valid_for, .. } => {
            assert_eq!(token, guard.token());
            assert!(*valid_for <= TTL);
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
    guard.lost().await;
    assert!(redlock.force_unlock("report").await.unwrap().deleted() == 0);
}

#[tokio::test]
async fn shutdown_gives_back_every_lock_and_takes_no_new_one() {
    let cluster = EtcdCluster::start(1);
    let redlock = client(&cluster);
    let guards = [
        redlock.try_lock("s/1", TTL).await.unwrap().unwrap(),
        redlock.try_lock("s/2", TTL).await.unwrap().unwrap(),
    ];
    let report = redlock.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.released, 2);
    assert!(report.is_complete(), "{report}");
    assert!(cluster.keys("s/").is_empty());
    for guard in guards {
        assert!(!guard.is_held());
        assert!(matches!(guard.release().await, Err(Error::Closed)));
    }
    assert!(matches!(redlock.try_lock("s/3", TTL).await, Err(Error::Closed)));
}

#[tokio::test]
async fn bad_settings_are_config_errors_that_say_which() {
    let setting = |result: quorumlock::Result<Redlock>| match result {
        Err(Error::Config(e)) => e.setting(),
        other => panic!("expected a config error, got {other:?}"),
    };
    let mixed = Redlock::builder()
        .nodes(["etcd://127.0.0.1:1", "redis://127.0.0.1:2"])
        .build();
    assert_eq!(setting(mixed), Setting::Nodes);
    let acked = Redlock::builder()
        .node("etcd://127.0.0.1:1")
        .replica_ack(quorumlock::ReplicaAck::new(1))
        .build();
    assert_eq!(setting(acked), Setting::ReplicaAck);
    assert_eq!(
        setting(Redlock::builder().node("etcd://127.0.0.1").build()),
        Setting::Nodes
    );
    let split = Redlock::builder()
        .nodes(["etcd://127.0.0.1:1", "127.0.0.1:2/app"])
        .build()
        .unwrap();
    assert_eq!(split.nodes(), 1, "one cluster");
    let cluster = EtcdCluster::start(1);
    let redlock = client(&cluster);
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

#[test]
fn settings_of_redis_nodes_are_refused_on_a_cluster() {
    let cluster = || Redlock::builder().node("etcd://127.0.0.1:1");
    let refused = |builder: quorumlock::RedlockBuilder| match builder.build() {
        Err(Error::Config(e)) => e.setting(),
        other => panic!("expected a config error, got {other:?}"),
    };
    assert_eq!(refused(cluster().heal(true)), Setting::Heal);
    assert_eq!(refused(cluster().batching(false)), Setting::Batching);
    assert_eq!(
        refused(cluster().replica_ack(quorumlock::ReplicaAck::new(1))),
        Setting::ReplicaAck
    );
    assert!(cluster().node_timeout(Duration::from_secs(1)).build().is_ok());
}
