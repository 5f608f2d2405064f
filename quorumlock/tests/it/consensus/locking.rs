//! Taking, keeping and giving back a lock: exclusion, renewal past the
//! ttl, extend, the release's report, multi-resource locks, and a lock
//! that is not renewed.

use std::time::Duration;

use quorumlock::LockOptions;
use quorumlock_testkit::eventually;

use super::store::{Space, Store};
use super::{HOLD, LOOK_WITHIN, TTL};

pub async fn a_lock_is_exclusive_outlives_its_ttl_when_renewed_and_is_gone_after_release<S: Store>() {
    let space = Space::<S>::shared("exclusive");
    let (a, b) = (space.client(), space.client());
    let mut guard = a.try_lock("orders/42", TTL).await.unwrap().expect("free");
    assert!(
        guard.fence_token().is_some(),
        "{} locks are always fenced",
        S::NAME
    );
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_none(), "held by a");
    assert_eq!(
        space.line("orders/42").len(),
        1,
        "a refused try_lock joins no line"
    );
    // Twice the ttl: only the renewals (etcd's keep-alives, ZooKeeper's
    // heartbeats) keep it.
    tokio::time::sleep(TTL * 2).await;
    assert!(guard.is_held(), "renewed: {:?} left", guard.remaining());
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_none());
    guard.extend(S::EXTEND_TO).await.unwrap();
    assert!(
        guard.remaining() > S::LEFT_AFTER_EXTEND,
        "{:?}",
        guard.remaining()
    );
    let report = guard.release().await.unwrap();
    assert_eq!(
        (report.confirmed, report.deleted, report.kept_until),
        (1, 1, None)
    );
    assert!(space.line("orders/42").is_empty());
    assert!(b.try_lock("orders/42", TTL).await.unwrap().is_some());
    assert!(b.shutdown(Duration::from_secs(2)).await.is_complete());
    let left = space.leftovers();
    assert!(left.is_empty(), "{left:?}");
}

pub async fn a_multi_resource_lock_is_all_or_nothing<S: Store>() {
    let space = Space::<S>::shared("all-or-nothing");
    let (a, b) = (space.steady(), space.steady());
    let both = a
        .try_lock(["acct/1", "acct/2"], HOLD)
        .await
        .unwrap()
        .expect("free");
    assert!(b.try_lock("acct/2", HOLD).await.unwrap().is_none());
    assert!(b.try_lock(["acct/3", "acct/2"], HOLD).await.unwrap().is_none());
    assert!(b.shutdown(Duration::from_secs(2)).await.is_complete());
    assert!(
        space.line("acct/3").is_empty(),
        "the refused attempt left nothing"
    );
    both.release().await.unwrap();
    let left = space.leftovers();
    assert!(left.is_empty(), "{left:?}");
}

pub async fn a_lock_that_is_not_renewed_ends_at_its_validity_and_its_entry_goes<S: Store>() {
    let space = Space::<S>::shared("not-renewed");
    let a = space
        .client()
        .with_options(LockOptions::new().auto_renew(false))
        .unwrap();
    let guard = a.try_lock("once", TTL).await.unwrap().expect("free");
    guard.lost().await;
    eventually("the entry deleted", LOOK_WITHIN, || space.line("once").is_empty()).await;
    assert!(space.client().try_lock("once", TTL).await.unwrap().is_some());
}
