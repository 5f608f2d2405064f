//! One permit of a [`Semaphore`](super::Semaphore), held: the lock of that
//! permit and which permit it is.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::lock::guard::{Guard, ReleaseReport};

/// A held permit of a [`Semaphore`](super::Semaphore): the [`Guard`] of the
/// permit's lock, and its index.
///
/// Everything a guard promises holds for the permit: the watchdog renews it
/// (with auto-renewal), [`Permit::lost`] fires once when it is lost, and
/// dropping it without [`Permit::release`] releases it in the background.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let pool = redlock.semaphore("gpu", 4)?;
/// let permit = pool.acquire(Duration::from_secs(60)).await?;
/// tokio::select! {
///     () = train_on(permit.index()) => {}
///     () = permit.lost() => eprintln!("lost GPU {}; stopping", permit.index()),
/// }
/// permit.release().await?;
/// # Ok(())
/// # }
/// # async fn train_on(_gpu: usize) {}
/// ```
#[derive(Debug)]
pub struct Permit {
    pub(super) index: usize,
    pub(super) guard: Guard,
}

impl Permit {
    /// Which permit this is: `0..permits`. No other holder has the same
    /// index while this permit is held (use it to pick the pooled thing:
    /// API key `index`, GPU `index`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The random token of the permit's lock (see [`Guard::token`]).
    pub fn token(&self) -> &str {
        self.guard.token()
    }

    /// The fencing token, when the client's options are
    /// [`fenced`](crate::LockOptions::fenced) (always on etcd and
    /// ZooKeeper): larger than that of every earlier holder of the **same
    /// permit**. Tokens of different permits are not ordered, since their
    /// holders may hold at the same time.
    pub fn fence_token(&self) -> Option<u64> {
        self.guard.fence_token()
    }

    /// Until when the permit is guaranteed to be ours (see
    /// [`Guard::valid_until`]).
    pub fn valid_until(&self) -> Instant {
        self.guard.valid_until()
    }

    /// Time left until [`Permit::valid_until`].
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// Whether the permit is still ours (see [`Guard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when the permit is lost (see [`Guard::lost`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// The guard of the permit's lock, for the rest of its API
    /// ([`Guard::extend`], [`Guard::start_deadline`]).
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The guard of the permit's lock, mutable (for [`Guard::extend`]).
    pub fn guard_mut(&mut self) -> &mut Guard {
        &mut self.guard
    }

    /// Gives the permit back (see [`Guard::release`]): the release also
    /// wakes the next waiter in the permit's hand-off queue.
    ///
    /// # Errors
    ///
    /// As [`Guard::release`].
    pub async fn release(self) -> Result<ReleaseReport> {
        self.guard.release().await
    }
}
