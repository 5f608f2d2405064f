//! The conformance suite of the consensus stores (etcd, ZooKeeper): what
//! the `Redlock` client promises on any store that keeps its own line of
//! waiters, written once and run against each store's real servers.
//!
//! - [`locking`]: exclusion, renewal, extend, the release's report,
//!   multi-resource locks, a lock that is not renewed.
//! - [`waiting`]: the wait in line, the wake-up, fencing tokens in the
//!   order of the hand-overs, a waiter whose entry vanished or whose wait
//!   ran out.
//! - [`lifecycle`]: inspect and unlock, shutdown, the minimum hold, and
//!   the settings refused as config errors.
//! - [`loss`]: a holder cut off from the store is told of the loss in time.
//! - [`semaphore`], [`blocking`] (feature `blocking`).
//! - [`chaos`]: mutual exclusion while members are killed, paused or cut
//!   off, with the test kit's chaos checker.
//!
//! Each store's module (`etcd`, `zookeeper`) gives the fixture
//! ([`store::Store`]), instantiates the suite ([`conformance_suite!`]) and
//! has the tests of what only that store does.

#[macro_use]
mod suite;

#[cfg(feature = "blocking")]
mod blocking;
mod chaos;
#[cfg(feature = "etcd")]
mod etcd;
mod interop;
mod lifecycle;
mod locking;
mod loss;
mod semaphore;
mod store;
mod waiting;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::time::Duration;

use quorumlock::{Guard, Redlock};

/// The ttl of the tests' locks: whole seconds (an etcd lease keeps them
/// exactly), long enough for the request timeout and the drift allowance.
const TTL: Duration = Duration::from_secs(2);

/// The ttl of a lock that must stay held while a test looks at the store
/// (taken with [`store::Space::steady`]).
const HOLD: Duration = Duration::from_secs(10);

/// How long `lock` waits in these tests: a waiter stays in line while the
/// test looks at the store, up to [`LOOK_WITHIN`] per look.
const WAIT: Duration = Duration::from_secs(60);

/// How long a test waits for what it expects to see in the store (a
/// waiter's entry, a deletion): seconds, as each look at a ZooKeeper
/// ensemble is a kazoo client in a python process of its own, and two
/// copies of the suite with their JVMs on two cores take that long. Only a
/// failing test waits it out.
const LOOK_WITHIN: Duration = Duration::from_secs(20);

/// How long a lock whose holder was lost may stay taken: the store ends
/// the lease or session (2 s, from the holder's last renewal) or the holder
/// gives it back once it reaches the store again, with room for a loaded
/// machine.
const FREED_WITHIN: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Takes `resource` with `redlock` as soon as it is free, trying every
/// 100 ms; panics once [`FREED_WITHIN`] has passed.
async fn take_once_freed(redlock: &Redlock, resource: &str) -> Guard {
    let deadline = tokio::time::Instant::now() + FREED_WITHIN;
    loop {
        if let Some(taken) = redlock.try_lock(resource, TTL).await.unwrap() {
            return taken;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{resource} still taken after {FREED_WITHIN:?}"
        );
        tokio::time::sleep(ms(100)).await;
    }
}
