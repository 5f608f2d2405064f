//! The wait in the store's line: a waiter woken by the release, fencing
//! tokens in the order of the hand-overs, a waiter whose entry vanished,
//! and one whose wait runs out. The holders take their locks with
//! [`Space::steady`] clients, as the test looks at the line meanwhile.

use std::time::Duration;

use quorumlock::{Error, LockOptions};
use quorumlock_testkit::eventually;
use tokio::time::Instant;

use super::store::{Space, Store};
use super::{HOLD, LOOK_WITHIN, ms};

pub async fn a_waiter_is_woken_by_the_release_and_gets_a_larger_fence_token<S: Store>() {
    let space = Space::<S>::shared("woken");
    let (a, b) = (space.steady(), space.steady());
    let first = a.lock("stock/sku-1", HOLD).await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = b.lock("stock/sku-1", HOLD).await.unwrap();
        (Instant::now(), guard.fence_token(), guard)
    });
    // The waiter is in line: its entry is the second of the resource.
    eventually("the waiter queued", LOOK_WITHIN, || {
        space.line("stock/sku-1").len() == 2
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

/// A waiter whose entry vanished while it waited (its lease or session
/// lapsed in a failover, or an operator deleted it) must not take the lock
/// when its predecessor goes: it would hold it with no entry, beside
/// whoever comes next.
pub async fn a_waiter_whose_entry_vanished_takes_its_place_again_before_it_holds<S: Store>() {
    let space = Space::<S>::shared("vanished");
    let (a, b, c) = (space.steady(), space.steady(), space.steady());
    let first = a.lock("till", HOLD).await.unwrap();
    let holder_entry = space.line("till");
    let waiting = tokio::spawn(async move { b.lock("till", HOLD).await.unwrap() });
    eventually("the waiter queued", LOOK_WITHIN, || space.line("till").len() == 2).await;
    let waiter_entry = space
        .line("till")
        .into_iter()
        .find(|entry| !holder_entry.contains(entry))
        .unwrap();
    space.remove("till", &waiter_entry);
    first.release().await.unwrap();
    let second = waiting.await.unwrap();
    // `second` says it holds the lock: then nobody else may take it.
    assert!(second.is_held());
    assert!(
        c.try_lock("till", HOLD).await.unwrap().is_none(),
        "two holders at once"
    );
    assert_eq!(
        space.line("till").len(),
        1,
        "the waiter holds with an entry of its own"
    );
    second.release().await.unwrap();
}

pub async fn a_waiter_gives_up_when_its_wait_runs_out_and_leaves_nothing<S: Store>() {
    let space = Space::<S>::shared("gives-up");
    let holder = space.steady();
    let guard = holder.lock("job", HOLD).await.unwrap();
    let waiter = space
        .steady()
        .with_options(LockOptions::new().wait(ms(300)))
        .unwrap();
    let started = Instant::now();
    match waiter.lock("job", HOLD).await {
        Err(Error::Held { .. }) => {}
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(started.elapsed() >= ms(300));
    assert!(waiter.shutdown(Duration::from_secs(2)).await.is_complete());
    assert_eq!(space.line("job").len(), 1, "only the holder's entry is left");
    guard.release().await.unwrap();
}

/// A waiter on `a` queued behind a multi-resource lock on `a` and `b`
/// created its entry before that lock created its entry on `b`: tokens
/// taken from the entries' creation (a ZooKeeper node's zxid, an etcd
/// key's revision) would go backwards here.
pub async fn fencing_tokens_grow_across_a_multi_resource_holder_and_a_waiter_behind_it<S: Store>() {
    let space = Space::<S>::shared("fence-order");
    let (y, x, z) = (space.steady(), space.steady(), space.steady());
    let first = y.lock("a", HOLD).await.unwrap();
    let both = tokio::spawn(async move { x.lock(["a", "b"], HOLD).await.unwrap() });
    eventually("the lock on a and b queued", LOOK_WITHIN, || {
        space.line("a").len() == 2
    })
    .await;
    let after = tokio::spawn(async move { z.lock("a", HOLD).await.unwrap() });
    eventually("the waiter on a queued", LOOK_WITHIN, || {
        space.line("a").len() == 3
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
