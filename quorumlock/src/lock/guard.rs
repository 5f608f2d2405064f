//! [`Guard`]: a held lock. Validity, loss signal, extend, release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::acquisition::Acquisition;
use super::hold::Hold;
pub use super::report::ReleaseReport;
use super::state::Held;
use super::watch::LockWatch;
use crate::config::START_MARGIN;
use crate::error::{Error, Result};
use crate::metrics::{self, HoldEnd};

/// A held lock.
///
/// The lock is only trustworthy until [`Guard::valid_until`]. With
/// auto-renewal (the default) the client's watchdog keeps moving that instant
/// forward; when it can no longer confirm the lock on a majority of nodes in
/// time, [`Guard::lost`] completes and [`Guard::is_held`] turns `false`, at
/// the latest when the validity runs out. Stop the critical section then.
///
/// Give the lock back with [`Guard::release`]. Dropping a guard without
/// releasing it stops its renewal and sends the release in the background
/// when a Tokio runtime is running (it never blocks); otherwise the keys
/// expire after their ttl. A background release runs only while the runtime
/// does: a program that ends soon after should call
/// [`Redlock::shutdown`](crate::Redlock::shutdown), which waits for it (see
/// its docs).
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
/// let guard = redlock.lock("doc:1001", Duration::from_secs(30)).await?;
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost: stopping"),
///     () = async { /* process the document */ } => {}
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard {
    held: Arc<Held>,
    /// The store's half: registrations, extend and release there.
    hold: Box<dyn Hold>,
    /// The least validity an extend must leave ([`crate::LockOptions::min_validity`]).
    min_validity: Duration,
    /// `release` completed: nothing is left for the drop to do.
    released: bool,
    acquisition: Acquisition,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("resources", &self.held.resources.names())
            .field("valid_until", &self.held.valid_until())
            .field("valid", &self.held.is_held())
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// Wraps a fresh lock that `hold` keeps on its store.
    pub(crate) fn new(held: Arc<Held>, hold: Box<dyn Hold>, min_validity: Duration) -> Guard {
        Guard {
            acquisition: Acquisition::first(&held),
            held,
            hold,
            min_validity,
            released: false,
        }
    }

    /// How the lock was taken: nodes that confirmed, time waited, attempts.
    pub fn acquisition(&self) -> Acquisition {
        self.acquisition
    }

    pub(crate) fn with_waited(mut self, waited: Duration) -> Guard {
        self.acquisition.waited = waited;
        self
    }

    pub(crate) fn with_attempts(mut self, attempts: u32) -> Guard {
        self.acquisition.attempts = attempts;
        self
    }

    /// The locked resource names.
    pub fn resources(&self) -> &[String] {
        self.held.resources.names()
    }

    /// The random token (128 bits, hex) stored as the keys' value.
    pub fn token(&self) -> &str {
        &self.held.token
    }

    /// The fencing token agreed at acquisition, when the lock was taken with
    /// [`crate::LockOptions::fenced`] (on etcd always: the revision at which
    /// the lock was seen ours; on ZooKeeper always: a zxid at which it was
    /// seen ours): larger than the token of every earlier
    /// holder of these resources. Pass it to the protected resource (e.g.
    /// [`crate::FencedWrite`]) so that it can refuse a stale holder.
    pub fn fence_token(&self) -> Option<u64> {
        self.held.fence
    }

    /// The instant until which the lock is guaranteed to be ours, on the
    /// monotonic clock: `start + ttl - drift` of the last confirmed round
    /// (acquire, renewal or extend), where `start` was taken before that
    /// round's first request; less when a node that confirmed it runs a
    /// clock measured to be fast (`ttl / rate` then replaces `ttl`: that
    /// node forgets the keys early). After it, another owner may hold the
    /// lock.
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    /// Time left until [`Guard::valid_until`] (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// The last instant at which work should start under this lock:
    /// [`Guard::valid_until`] minus one renewal round (the client's node
    /// timeout) and [`START_MARGIN`].
    ///
    /// Work that starts later could not count on its first renewal, and may
    /// run past the validity (beside the next holder) before the loss signal
    /// can stop it. [`Redlock::with_lock`](crate::Redlock::with_lock),
    /// [`Redlock::try_with_lock`](crate::Redlock::try_with_lock) and
    /// `quorumlock run` never start work after it. With a guard from
    /// [`Redlock::lock`](crate::Redlock::lock), check it right before
    /// starting work that something may have delayed since (a busy runtime
    /// thread, a blocking call).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::Redlock;
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
    /// let guard = redlock.lock("stock:sku-42", Duration::from_secs(10)).await?;
    /// if Instant::now() < guard.start_deadline() {
    ///     // Deduct the stock: the lock has time left for its renewal.
    /// }
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn start_deadline(&self) -> Instant {
        let valid_until = self.valid_until();
        valid_until
            .checked_sub(self.start_margin())
            .unwrap_or(self.held.acquired_at().min(valid_until))
    }

    /// Whether work may start under this lock now (see
    /// [`Guard::start_deadline`]), or the error to return instead:
    /// [`Error::Lost`] when the lock is gone, [`Error::ValidityUsedUp`] when
    /// less than the start margin is left.
    pub(crate) fn check_start(&self) -> Result<()> {
        if !self.is_held() {
            return Err(self.lost_error(self.last_confirmed()));
        }
        let now = Instant::now();
        if now < self.start_deadline() {
            return Ok(());
        }
        Err(Error::ValidityUsedUp {
            elapsed: now.saturating_duration_since(self.held.acquired_at()),
            ttl: self.held.ttl(),
            min: self.start_margin(),
        })
    }

    fn start_margin(&self) -> Duration {
        self.hold.round() + START_MARGIN
    }

    /// Whether the lock is still ours: not lost, and its validity has not
    /// passed. Check it before each step of a long critical section.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Completes when the lock is lost: when renewal finds another owner on a
    /// majority of nodes, or at the latest when [`Guard::valid_until`] passes
    /// without a confirmed renewal (a local timer, so it fires on time even
    /// when every node hangs), or when the client is shut down
    /// ([`Redlock::shutdown`](crate::Redlock::shutdown) releases every lock). Completes at once if the
    /// lock is already lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: drop it and call it again at will.
    pub async fn lost(&self) {
        self.held.lost().await;
    }

    /// A view of this lock's validity that lives apart from the guard: for
    /// code that must stop on a loss while the guard is owned elsewhere
    /// (see [`LockWatch`]).
    pub fn watch(&self) -> LockWatch {
        LockWatch::new(Arc::clone(&self.held))
    }

    /// Resets the lock's ttl to `ttl` on every node that still holds our
    /// token, and moves [`Guard::valid_until`] to `start + ttl - drift`.
    /// Renewals by the watchdog then use the new ttl.
    ///
    /// Succeeds only when a majority of all nodes confirmed before the current
    /// validity ran out. A failed extend never deletes anything: the lock
    /// stays valid until the old [`Guard::valid_until`].
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] when the lock was lost or its validity had passed,
    ///   or when so many nodes no longer hold our token that no majority can.
    /// - [`Error::Unreachable`] when failing nodes kept the extend from a
    ///   majority in time.
    /// - [`Error::ValidityUsedUp`] when the new validity is below the minimum.
    /// - [`Error::Config`] for a ttl the client rejects (see
    ///   [`Redlock::try_lock`](crate::Redlock::try_lock)).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.hold.extend(&self.held, ttl, self.min_validity).await
    }

    /// Stops renewal and deletes the lock's keys on every node,
    /// owner-checked, concurrently.
    ///
    /// A lock taken with [`crate::LockOptions::min_hold`] and released before
    /// that time has passed is kept instead: its keys are set, owner-checked,
    /// to expire when it passes, and [`ReleaseReport::kept_until`] says when.
    ///
    /// Returns as soon as a majority of nodes confirmed that they hold
    /// nothing of ours (deleted, or already gone): from then on no majority
    /// holds the lock, so others can take it. The nodes still to answer get
    /// their delete all the same; it was handed to their connections before
    /// this returns and completes in the background (bounded by the ttl,
    /// after which the keys expire anyway), so a slow or dead node never adds
    /// its latency to a release. The report counts the answers received by
    /// the time it returns.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when fewer than a majority of nodes answered:
    /// the lock may then block other owners until its ttl runs out.
    /// [`Error::Closed`] when the client was shut down, which released the
    /// lock itself.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves the release to the
    /// guard's drop (sent in the background, see the type docs).
    pub async fn release(mut self) -> Result<ReleaseReport> {
        self.hold.stop_renewal();
        // False when a loss or a shutdown has begun giving the lock back.
        let claimed = self.held.claim_release();
        if self.is_closed() && !claimed {
            // The shutdown released the lock.
            self.released = true;
            return Err(Error::Closed);
        }
        let report = self.hold.release(&self.held, claimed).await;
        self.released = true;
        metrics::hold(self.held.acquired_at().elapsed(), HoldEnd::Released);
        tracing::debug!(resources = ?self.resources(), ?report, "lock released");
        report
    }

    fn is_closed(&self) -> bool {
        self.hold.is_closed()
    }

    /// The [`Error::Lost`] for this lock, with `confirmed` nodes
    /// ([`Error::Closed`] once the client shut down, which takes every lock).
    pub(crate) fn lost_error(&self, confirmed: usize) -> Error {
        self.hold.lost_error(confirmed)
    }

    /// Nodes that confirmed our token in the last round: the acquisition,
    /// or the last renewal confirmed since (1 on etcd or ZooKeeper).
    pub fn last_confirmed(&self) -> usize {
        self.held.confirmed()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.hold.stop_renewal();
        self.hold.unregister();
        if self.released || !self.held.claim_release() {
            return;
        }
        metrics::hold(self.held.acquired_at().elapsed(), HoldEnd::Released);
        // Never block in Drop.
        self.hold.release_in_background(&self.held);
    }
}
