//! Hooks for deterministic simulation, behind the `sim` feature: for the
//! project's simulator (`quorumlock-sim`), not for applications. **Unstable**:
//! nothing here is covered by semantic versioning, and a client built with
//! these hooks is no faster or safer than one without.
//!
//! Two things let the simulator run the real client, unchanged, against
//! simulated nodes, network and time:
//! - **Connections from a [`Dialer`]**
//!   ([`RedlockBuilder::dialer`](crate::RedlockBuilder::dialer)): each
//!   connection to a single-server node (requests and pub/sub) is the
//!   stream the dialer returns for the node's `host:port`, in place of a TCP
//!   connection, bounded by the client's connect timeout as a TCP connect
//!   is. Redis Cluster and Sentinel members still connect over TCP.
//! - **One seed for time and chance** ([`enter`]): while a thread has
//!   entered a simulation, the wall clock the library reads (the unix time
//!   it sends with fenced acquires and hand-off deadlines) is the
//!   simulation's epoch plus the Tokio clock's time since [`enter`] (paused
//!   under simulation), and every random draw (lock tokens, retry jitter,
//!   waiter ids, the semaphore's first slot) comes from a generator seeded
//!   from the seed. Tokio's own timers and the runtime's scheduling are the
//!   caller's to make deterministic (one current-thread runtime with the
//!   paused clock).

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// A connection to a node, as a [`Dialer`] opens it.
pub type Stream = Pin<Box<dyn redis::aio::AsyncStream + Send>>;

/// Opens node connections in place of TCP (see the module docs).
pub trait Dialer: Send + Sync + 'static {
    /// A connection to `address` (the `host:port` of the node's URL). An
    /// error is the node's connection error, as a refused TCP connect is; a
    /// future that never completes is bounded by the connect timeout.
    fn dial(&self, address: &str) -> BoxFuture<'static, io::Result<Stream>>;
}

impl crate::RedlockBuilder {
    /// Unstable (the `sim` feature): single servers' connections come from
    /// `dialer` instead of TCP (see [`crate::sim`]).
    pub fn dialer(mut self, dialer: Arc<dyn Dialer>) -> Self {
        self.dialer = DialerSetting(Some(dialer));
        self
    }
}

/// A builder's dialer, if one was set.
#[derive(Clone, Default)]
pub(crate) struct DialerSetting(pub(crate) Option<Arc<dyn Dialer>>);

impl fmt::Debug for DialerSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(Dialer)" } else { "None" })
    }
}

/// A simulation's time and chance on the thread that entered it.
struct Source {
    rng: StdRng,
    /// The wall clock at `start`.
    epoch: Duration,
    start: Instant,
}

thread_local! {
    static SOURCE: RefCell<Option<Source>> = const { RefCell::new(None) };
}

/// Makes the calling thread's wall clock and random draws come from the
/// simulation (see the module docs) until the returned guard is dropped.
/// Call it inside the simulation's runtime (it reads the Tokio clock), on
/// the thread that runs it.
///
/// # Panics
///
/// When the thread is already in a simulation: one seed per run.
#[must_use = "the simulation's time and chance last while the guard lives"]
pub fn enter(seed: u64, epoch: Duration) -> Entered {
    SOURCE.with(|source| {
        let mut source = source.borrow_mut();
        assert!(source.is_none(), "this thread is already in a simulation");
        *source = Some(Source {
            rng: StdRng::seed_from_u64(seed),
            epoch,
            start: Instant::now(),
        });
    });
    Entered {
        _thread_bound: std::marker::PhantomData,
    }
}

/// A thread's place in a simulation (see [`enter`]); leaves it when dropped.
pub struct Entered {
    /// The guard belongs to the thread that entered.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        SOURCE.with(|source| source.borrow_mut().take());
    }
}

/// The simulated wall clock, when this thread is in a simulation.
pub(crate) fn since_epoch() -> Option<Duration> {
    SOURCE.with(|source| {
        let source = source.borrow();
        let source = source.as_ref()?;
        Some(source.epoch + source.start.elapsed())
    })
}

/// Fills `bytes` from the simulation's generator; `false` (untouched)
/// outside a simulation.
pub(crate) fn fill(bytes: &mut [u8]) -> bool {
    SOURCE.with(|source| match source.borrow_mut().as_mut() {
        Some(source) => {
            source.rng.fill_bytes(bytes);
            true
        }
        None => false,
    })
}
