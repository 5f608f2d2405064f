//! The etcd backend against real etcd members started by the test kit: the
//! lock's API (basics), mutual exclusion under member failures (chaos), and
//! sharing locks with `etcdctl lock` (interop), and the blocking client.

mod basics;
#[cfg(feature = "blocking")]
mod blocking;
mod chaos;
mod interop;
mod semaphore;

use std::time::Duration;

/// A ttl that an etcd lease keeps exactly (whole seconds), long enough for
/// the request timeout and the drift allowance.
const TTL: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
