//! A holder cut off from the store hears of the loss of its lock before
//! the store can end it and give the lock to another.

use tokio::time::Instant;

use super::store::{Space, Store};
use super::{TTL, take_once_freed};

pub async fn a_holder_cut_off_from_the_store_hears_of_the_loss_before_the_store_can_end_its_lock<S: Store>() {
    // A store of its own: its only member is paused.
    let space = Space::<S>::own(1, "cut-off");
    let redlock = space.client();
    let guard = redlock.try_lock("paused", TTL).await.unwrap().expect("free");
    let paused = space.store().pause(0);
    guard.lost().await;
    let signalled = Instant::now();
    // The store's clock for the lease or session started when it got our
    // last renewal, after we sent it; our validity ended before.
    assert!(signalled >= guard.valid_until());
    assert!(!guard.is_held());
    paused.resume();
    // The store ends the lease or session by itself (or the holder gives
    // its lost lock back), and the lock is free again.
    let taken = take_once_freed(&space.client(), "paused").await;
    assert!(taken.fence_token() > guard.fence_token());
}
