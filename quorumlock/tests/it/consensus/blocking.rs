//! The blocking client (feature `blocking`) on a consensus store: the same
//! calls as on Redis, renewal while the caller's thread is busy, release.

use std::time::Duration;

use quorumlock::blocking::Redlock;

use super::TTL;
use super::store::{Space, Store};

pub fn the_blocking_client_locks_renews_and_releases<S: Store>() {
    let space = Space::<S>::shared("blocking");
    let client = || Redlock::builder().node(space.url()).build_blocking().unwrap();
    let (a, b) = (client(), client());
    let guard = a.try_lock("blocking", TTL).unwrap().expect("free");
    assert!(guard.fence_token().is_some());
    assert!(b.try_lock("blocking", TTL).unwrap().is_none());
    // The caller's thread is busy past the ttl; the client's runtime renews.
    std::thread::sleep(TTL + Duration::from_millis(500));
    assert!(guard.is_held());
    assert!(b.try_lock("blocking", TTL).unwrap().is_none());
    assert_eq!(guard.release().unwrap().deleted, 1);
    let taken = b.with_lock("blocking", TTL, |g| g.fence_token()).unwrap();
    assert!(taken.is_some());
    assert!(space.line("blocking").is_empty());
}
