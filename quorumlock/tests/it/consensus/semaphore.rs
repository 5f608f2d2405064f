//! A semaphore on a consensus store: its permits are locks of the store's
//! own recipe, and a waiter polls at the retry delay (one line per key).

use super::store::{Space, Store};
use super::{TTL, ms};

pub async fn a_semaphore_hands_out_k_permits_and_a_waiter_gets_the_released_one<S: Store>() {
    let space = Space::<S>::shared("semaphore");
    let (a, b) = (space.client(), space.client());
    let pool = a.semaphore("pool", 2).unwrap();
    let first = pool.try_acquire(TTL).await.unwrap().expect("a free permit");
    let second = pool.try_acquire(TTL).await.unwrap().expect("a free permit");
    assert_ne!(first.index(), second.index());
    assert!(first.fence_token().is_some(), "always fenced here");
    let polling = b.with_options(b.options().retry_delay(ms(50))).unwrap();
    let other = polling.semaphore("pool", 2).unwrap();
    assert!(other.try_acquire(TTL).await.unwrap().is_none(), "a third holder");

    let waiter = tokio::spawn(async move { other.acquire(TTL).await.unwrap() });
    let freed = second.index();
    second.release().await.unwrap();
    let permit = waiter.await.unwrap();
    assert_eq!(permit.index(), freed);
    assert!(permit.is_held() && first.is_held());
}
