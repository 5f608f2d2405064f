//! The ZooKeeper backend against real ZooKeeper servers started by the test
//! kit: the lock's API (basics), mutual exclusion under server failures
//! (chaos), sharing locks with python's kazoo (interop), and the blocking
//! client.

mod basics;
#[cfg(feature = "blocking")]
mod blocking;
mod chaos;
mod interop;
mod semaphore;

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::zookeeper::ZkEnsemble;

/// The lock's ttl in these tests.
const TTL: Duration = Duration::from_secs(2);

/// The session timeout the tests' clients ask for: a dead client's lock
/// lasts this long, and a cut-off holder is told of the loss within two
/// thirds of it.
const SESSION: &str = "session_timeout=2s";

/// How long a test waits for what it expects to see in the ensemble (a
/// waiter's node, a deletion): seconds, as each look is a kazoo client in a
/// python process of its own, and two copies of the suite with their JVMs
/// on two cores take that long. Only a failing test waits it out.
const QUEUED_WITHIN: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The URL of `ensemble` with the tests' session timeout.
fn url(ensemble: &ZkEnsemble) -> String {
    format!("{}?{SESSION}", ensemble.url())
}

/// How long `lock` waits in these tests: a waiter stays in line while the
/// test looks at the ensemble, up to [`QUEUED_WITHIN`] per look.
const WAIT: Duration = Duration::from_secs(60);

/// The ttl of a lock that must stay held while a test looks at the
/// ensemble (see [`steady`]).
const HOLD: Duration = Duration::from_secs(10);

/// A client with the default 10 s session, for a holder that must keep its
/// lock while the test looks at the ensemble: with the tests' 2 s session a
/// loaded machine (two copies of the suite and their JVMs on two cores) can
/// hold heartbeats up past the 1.3 s they vouch for, and the lock is lost,
/// as it must be. Take its locks with [`HOLD`].
fn steady(ensemble: &ZkEnsemble) -> Redlock {
    Redlock::builder()
        .node(ensemble.url())
        .wait(WAIT)
        .build()
        .expect("ZooKeeper client")
}

/// A client of its own (a session of its own) on `ensemble`.
fn client(ensemble: &ZkEnsemble) -> Redlock {
    Redlock::builder()
        .node(url(ensemble))
        .wait(WAIT)
        .build()
        .expect("ZooKeeper client")
}
