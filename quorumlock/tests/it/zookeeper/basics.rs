//! The lock's API on one ZooKeeper server: exclusion, renewal, extend,
//! release, waiting, fencing, multi-resource locks, inspection, shutdown,
//! and the errors a caller can act on.

use std::time::Duration;

use quorumlock::{Error, IdempotencyError, LockOptions, Redlock, Setting, Verdict};
use quorumlock_testkit::eventually;
use quorumlock_testkit::zookeeper::ZkEnsemble;
use tokio::time::Instant;

use super::{HOLD, QUEUED_WITHIN, TTL, client, ms, steady};

#[tokio::test]
async fn a_lock_is_exclusive_outlives_its_session_share_when_renewed_and_is_gone_after_release() {
    let zk = ZkEnsemble::start(1);
    let (a, b) = (client(&zk), client(&zk));
    let mut guard = a.try_lock("orders/42", TTL).await.unwrap().expect("free");
    assert!(guard.fence_token().is_some(), "ZooKeeper locks are always fenced");
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_none(), "held by a");
    assert_eq!(
        zk.children("/orders/42").len(),
        1,
        "a refused try_lock joins no line"
    );
    // Twice the ttl: only the heartbeats keep it.
    tokio::time::sleep(TTL * 2).await;
    assert!(guard.is_held(), "renewed: {:?} left", guard.remaining());
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_none());
    guard.extend(TTL).await.unwrap();
    assert!(guard.remaining() > ms(1000), "{:?}", guard.remaining());
    let report = guard.release().await.unwrap();
    assert_eq!(
        (report.confirmed, report.deleted, report.kept_until),
        (1, 1, None)
    );
    assert!(zk.children("/orders/42").is_empty());
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_some());
    assert!(b.shutdown(Duration::from_secs(2)).await.is_complete());
    assert!(
        zk.children("/orders/42").is_empty(),
        "{:?}",
        zk.children("/orders/42")
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_and_gets_a_larger_fence_token() {
    let zk = ZkEnsemble::start(1);
    let (a, b) = (steady(&zk), steady(&zk));
    let first = a.lock("stock/sku-1", HOLD).await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = b.lock("stock/sku-1", HOLD).await.unwrap();
        (Instant::now(), guard.fence_token(), guard)
    });
    eventually("the waiter queued", QUEUED_WITHIN, || {
        zk.children("/stock/sku-1").len() == 2
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

#[tokio::test]
async fn a_waiter_gives_up_when_its_wait_runs_out_and_leaves_nothing() {
    let zk = ZkEnsemble::start(1);
    let holder = steady(&zk);
    let guard = holder.lock("job", HOLD).await.unwrap();
    let waiter = steady(&zk)
        .with_options(LockOptions::new().wait(ms(300)))
        .unwrap();
    let started = Instant::now();
    match waiter.lock("job", HOLD).await {
        Err(Error::Held { .. }) => {}
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(started.elapsed() >= ms(300));
    assert!(waiter.shutdown(Duration::from_secs(2)).await.is_complete());
    assert_eq!(zk.children("/job").len(), 1, "only the holder's node is left");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_holder_cut_off_from_zookeeper_hears_of_the_loss_before_its_session_can_expire() {
    let zk = ZkEnsemble::start(1);
    let redlock = client(&zk);
    let guard = redlock.try_lock("paused", TTL).await.unwrap().expect("free");
    let paused = zk.pause(0);
    guard.lost().await;
    let signalled = Instant::now();
    // The server's clock for the session started when it heard our last
    // heartbeat, after we sent it; our validity ended before.
    assert!(signalled >= guard.valid_until());
    assert!(!guard.is_held());
    paused.resume();
    let other = client(&zk);
    let mut taken = None;
    for _ in 0..60 {
        taken = other.try_lock("paused", TTL).await.unwrap();
        if taken.is_some() {
            break;
        }
        tokio::time::sleep(ms(100)).await;
    }
    let taken = taken.expect("the lost lock was given back or its session expired");
    assert!(taken.fence_token() > guard.fence_token());
}

#[tokio::test]
async fn a_multi_resource_lock_is_all_or_nothing() {
    let zk = ZkEnsemble::start(1);
    let (a, b) = (steady(&zk), steady(&zk));
    let both = a
        .try_lock(["acct/1", "acct/2"], HOLD)
        .await
        .unwrap()
        .expect("free");
    assert!(b.try_lock("acct/2", HOLD).await.unwrap().is_none());
    assert!(b.try_lock(["acct/3", "acct/2"], HOLD).await.unwrap().is_none());
    assert!(b.shutdown(Duration::from_secs(2)).await.is_complete());
    assert!(
        zk.children("/acct/3").is_empty(),
        "the refused attempt left nothing"
    );
    both.release().await.unwrap();
    assert!(zk.children("/acct/1").is_empty() && zk.children("/acct/2").is_empty());
}

#[tokio::test]
async fn a_lock_that_is_not_renewed_ends_at_its_validity_and_its_node_goes() {
    let zk = ZkEnsemble::start(1);
    let a = client(&zk)
        .with_options(LockOptions::new().auto_renew(false))
        .unwrap();
    let guard = a.try_lock("once", TTL).await.unwrap().expect("free");
    guard.lost().await;
    eventually("the node deleted", QUEUED_WITHIN, || {
        zk.children("/once").is_empty()
    })
    .await;
    assert!(client(&zk).try_lock("once", TTL).await.unwrap().is_some());
}

#[tokio::test]
async fn inspect_and_unlock_see_the_holder_and_free_the_lock() {
    let zk = ZkEnsemble::start(1);
    let redlock = client(&zk);
    let guard = redlock.try_lock("report", TTL).await.unwrap().expect("free");
    let inspection = redlock.inspect("report").await.unwrap();
    match &inspection.verdict {
        Verdict::Held { token, .. } => assert_eq!(token, guard.token()),
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
    // Its next heartbeat finds the node gone.
    guard.lost().await;
    assert_eq!(redlock.force_unlock("report").await.unwrap().deleted(), 0);
}

#[tokio::test]
async fn shutdown_gives_back_every_lock_and_takes_no_new_one() {
    let zk = ZkEnsemble::start(1);
    let redlock = client(&zk);
    let guards = [
        redlock.try_lock("s/1", TTL).await.unwrap().unwrap(),
        redlock.try_lock("s/2", TTL).await.unwrap().unwrap(),
    ];
    let report = redlock.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report.released, 2);
    assert!(report.is_complete(), "{report}");
    assert!(zk.children("/s/1").is_empty() && zk.children("/s/2").is_empty());
    for guard in guards {
        assert!(!guard.is_held());
        assert!(matches!(guard.release().await, Err(Error::Closed)));
    }
    assert!(matches!(redlock.try_lock("s/3", TTL).await, Err(Error::Closed)));
}

#[tokio::test]
async fn a_chroot_in_the_url_keeps_locks_apart() {
    let zk = ZkEnsemble::start(1);
    let in_app = |app: &str| {
        Redlock::builder()
            .node(format!("{}/apps/{app}?session_timeout=2s", zk.url()))
            .build()
            .unwrap()
    };
    let (a, b) = (in_app("a"), in_app("b"));
    let held = a.try_lock("job", TTL).await.unwrap().expect("free");
    assert!(b.try_lock("job", TTL).await.unwrap().is_some(), "another chroot");
    assert_eq!(zk.children("/apps/a/job").len(), 1);
    held.release().await.unwrap();
}

#[tokio::test]
async fn bad_settings_are_config_errors_that_say_which() {
    let setting = |result: quorumlock::Result<Redlock>| match result {
        Err(Error::Config(e)) => e.setting(),
        other => panic!("expected a config error, got {other:?}"),
    };
    let mixed = Redlock::builder()
        .nodes(["zk://127.0.0.1:1", "redis://127.0.0.1:2"])
        .build();
    assert_eq!(setting(mixed), Setting::Nodes);
    let acked = Redlock::builder()
        .node("zk://127.0.0.1:1")
        .replica_ack(quorumlock::ReplicaAck::new(1))
        .build();
    assert_eq!(setting(acked), Setting::ReplicaAck);
    assert_eq!(
        setting(Redlock::builder().node("zk://127.0.0.1").build()),
        Setting::Nodes
    );
    let split = Redlock::builder()
        .nodes(["zk://127.0.0.1:1", "127.0.0.1:2/app"])
        .build()
        .unwrap();
    assert_eq!(split.nodes(), 1, "one ensemble");
    let zk = ZkEnsemble::start(1);
    let redlock = client(&zk);
    for ttl in [Duration::ZERO, Duration::from_secs(366 * 24 * 60 * 60), ms(400)] {
        match redlock.try_lock("r", ttl).await {
            Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::Ttl),
            other => panic!("ttl {ttl:?}: expected a config error, got {other:?}"),
        }
    }
    match redlock.try_lock("a//b", TTL).await {
        Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::Resources),
        other => panic!("expected a config error, got {other:?}"),
    }
    let kept = redlock
        .with_options(LockOptions::new().min_hold(Duration::from_secs(5)))
        .unwrap();
    match kept.try_lock("r", TTL).await {
        Err(Error::Config(e)) => assert_eq!(e.setting(), Setting::MinHold),
        other => panic!("expected a config error, got {other:?}"),
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

/// A waiter on `a` queued behind a multi-resource lock on `a` and `b`
/// created its node before that lock created its node on `b`: tokens taken
/// from the nodes' creation zxids would go backwards here.
#[tokio::test]
async fn fencing_tokens_grow_across_a_multi_resource_holder_and_a_waiter_behind_it() {
    let zk = ZkEnsemble::start(1);
    let (y, x, z) = (steady(&zk), steady(&zk), steady(&zk));
    let first = y.lock("a", HOLD).await.unwrap();
    let both = tokio::spawn(async move { x.lock(["a", "b"], HOLD).await.unwrap() });
    eventually("the lock on a and b queued", QUEUED_WITHIN, || {
        zk.children("/a").len() == 2
    })
    .await;
    let after = tokio::spawn(async move { z.lock("a", HOLD).await.unwrap() });
    eventually("the waiter on a queued", QUEUED_WITHIN, || {
        zk.children("/a").len() == 3
    })
    .await;
    let first_fence = first.fence_token().unwrap();
    first.release().await.unwrap();
    let both = both.await.unwrap();
    let both_fence = both.fence_token().unwrap();
    assert!(both_fence > first_fence, "{both_fence} after {first_fence}");
    both.release().await.unwrap();
    let last = after.await.unwrap();
    let last_fence = last.fence_token().unwrap();
    assert!(last_fence > both_fence, "{last_fence} after {both_fence}");
    last.release().await.unwrap();
}

/// A holder whose process stops (a stop-the-world pause: here its runtime
/// is simply not driven) past its session timeout: the ensemble expires its
/// session, another client takes the lock, and the holder, when it runs
/// again, finds its lock not held and its loss signalled, with a smaller
/// fencing token than the new holder's, whatever its ttl.
#[test]
fn a_holder_paused_past_its_session_timeout_finds_the_lock_lost() {
    let zk = ZkEnsemble::start(1);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (paused, running) = (runtime(), runtime());
    let holder = paused.block_on(async { client(&zk) });
    // A ttl far beyond the session timeout: the session bounds the validity.
    let guard = paused
        .block_on(holder.try_lock("frozen", Duration::from_secs(10)))
        .unwrap()
        .expect("free");
    // From here on nothing drives the holder's runtime: no heartbeat, no
    // ping of its session.
    let taken = running.block_on(async {
        let other = client(&zk);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(taken) = other.try_lock("frozen", TTL).await.unwrap() {
                return taken;
            }
            assert!(
                Instant::now() < deadline,
                "the paused holder's session never expired"
            );
            tokio::time::sleep(ms(100)).await;
        }
    });
    assert!(!guard.is_held(), "the paused holder still counts on its lock");
    paused.block_on(guard.lost());
    assert!(taken.fence_token() > guard.fence_token());
    running.block_on(taken.release()).unwrap();
}

/// An attempt dropped at any point (here by a timeout, at every moment of
/// its first milliseconds, its create among them) leaves no node behind: a
/// node it made without learning of it would hold up the line until its
/// session ends.
#[tokio::test]
async fn an_attempt_dropped_at_any_point_leaves_no_node() {
    let zk = ZkEnsemble::start(1);
    let redlock = client(&zk);
    // The session first, so that the timeouts below fall inside attempts.
    drop(redlock.try_lock("warm", TTL).await.unwrap());
    for micros in (0..6000).step_by(150) {
        let attempt = redlock.lock("dropped", TTL);
        if let Ok(taken) = tokio::time::timeout(Duration::from_micros(micros), attempt).await {
            taken.unwrap().release().await.unwrap();
        }
    }
    eventually(
        "every dropped attempt's node deleted",
        Duration::from_secs(5),
        || zk.children("/dropped").is_empty(),
    )
    .await;
    assert!(client(&zk).try_lock("dropped", TTL).await.unwrap().is_some());
}
