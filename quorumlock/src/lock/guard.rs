//! [`Guard`]: a held lock. Validity, loss signal, extend, release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::acquisition::Acquisition;
use super::state::Held;
#[cfg(feature = "etcd")]
use crate::backend::etcd;
use crate::backend::redlock::quorum::Until;
pub use crate::backend::redlock::release::ReleaseReport;
use crate::backend::redlock::release::{give_back, release_in_background};
use crate::backend::redlock::shared::Shared;
use crate::backend::redlock::watchdog;
use crate::backend::redlock::wire::lock::Extend;
#[cfg(feature = "zookeeper")]
use crate::backend::zookeeper;
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
    /// The store the lock lives in, and the guard's registrations there.
    store: Store,
    /// The least validity an extend must leave ([`crate::LockOptions::min_validity`]).
    min_validity: Duration,
    /// `release` completed: nothing is left for the drop to do.
    released: bool,
    acquisition: Acquisition,
}

/// Where a guard's lock lives: the backend half of the guard.
enum Store {
    /// Keys on N Redis nodes (Redlock).
    Redis {
        shared: Arc<Shared>,
        /// Registration with the client's holders (see `Holders`).
        holder: u64,
        /// Registration with the watchdog, when auto-renewed.
        renewal: Option<u64>,
    },
    /// A key per resource on an etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(etcd::Hold),
    /// An ephemeral node per resource on a ZooKeeper ensemble.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(zookeeper::Hold),
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
    /// Wraps a fresh lock; registers it with the watchdog when `renew`.
    pub(crate) fn new(shared: &Arc<Shared>, held: Held, renew: bool, min_validity: Duration) -> Guard {
        let held = Arc::new(held);
        let holder = shared.holders.insert(&held);
        let renewal = renew.then(|| watchdog::register(&shared.watchdog, &held));
        Guard {
            acquisition: Acquisition::first(&held),
            held,
            store: Store::Redis {
                shared: Arc::clone(shared),
                holder,
                renewal,
            },
            min_validity,
            released: false,
        }
    }

    /// Wraps a fresh lock on etcd; renews it with the store's keep-alive
    /// when `renew`.
    #[cfg(feature = "etcd")]
    pub(crate) fn etcd(
        store: &Arc<etcd::Store>,
        (held, keys): (Held, etcd::Keys),
        renew: bool,
        min_validity: Duration,
    ) -> Guard {
        let held = Arc::new(held);
        let hold = etcd::Hold::new(store, &held, keys, renew);
        Guard {
            acquisition: Acquisition::first(&held),
            held,
            store: Store::Etcd(hold),
            min_validity,
            released: false,
        }
    }

    /// Wraps a fresh lock on ZooKeeper; renews it with the store's
    /// heartbeat when `renew`.
    #[cfg(feature = "zookeeper")]
    pub(crate) fn zookeeper(
        store: &Arc<zookeeper::Store>,
        (held, nodes): (Held, zookeeper::Nodes),
        renew: bool,
        min_validity: Duration,
    ) -> Guard {
        let held = Arc::new(held);
        let hold = zookeeper::Hold::new(store, &held, nodes, renew);
        Guard {
            acquisition: Acquisition::first(&held),
            held,
            store: Store::ZooKeeper(hold),
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
    /// BackgroundWork that starts later could not count on its first renewal, and may
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
        let round = match &self.store {
            Store::Redis { shared, .. } => shared.quorum.node_timeout,
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => hold.store.request_timeout,
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => hold.store.request_timeout,
        };
        round + START_MARGIN
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
        let shared = match &self.store {
            Store::Redis { shared, .. } => shared,
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => return hold.extend(&self.held, ttl, self.min_validity).await,
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => return hold.extend(&self.held, ttl, self.min_validity).await,
        };
        let quorum = &shared.quorum;
        let ttl = quorum.check_ttl(ttl, self.min_validity)?;
        if shared.is_closed() {
            return Err(Error::Closed);
        }
        let start = Instant::now();
        let valid_until = self.held.valid_until();
        if self.held.is_lost() || start >= valid_until {
            return Err(self.lost_error(0));
        }
        // Confirmations count only if they arrive while the lock is still ours.
        let deadline = (start + quorum.node_timeout).min(valid_until);
        let extend = Arc::new(Extend {
            keys: Arc::clone(self.held.resources.keys()),
            token: Arc::clone(&self.held.token),
            ttl_ms: crate::backend::redlock::wire::millis(ttl),
        });
        let tally = quorum
            .ask(&extend, deadline, deadline, Until::Decided, |extended| *extended)
            .await;
        if !tally.reached() {
            tracing::debug!(resources = ?self.resources(), ?tally, "extend failed");
            return Err(if tally.refused_by_majority() {
                self.lost_error(tally.ok)
            } else {
                tally.unreachable()
            });
        }
        let lease = quorum.lease(start, ttl, &tally);
        let left = lease.left(self.min_validity)?;
        if !self.held.confirm(&lease, tally.ok) {
            return Err(self.lost_error(tally.ok));
        }
        tracing::debug!(resources = ?self.resources(), ?left, "lock extended");
        Ok(())
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
        self.stop_renewal();
        // False when a loss or a shutdown has begun giving the lock back.
        let claimed = self.held.claim_release();
        if self.is_closed() && !claimed {
            // The shutdown released the lock.
            self.released = true;
            return Err(Error::Closed);
        }
        let report = match &self.store {
            Store::Redis { shared, holder, .. } => {
                let given = give_back(&shared.quorum, &self.held, None, Until::Answered).await;
                shared.holders.remove(*holder);
                ReleaseReport::from_tally(given.tally, given.kept_until)
            }
            // A lock lost first was given back by its renewal task.
            #[cfg(any(feature = "etcd", feature = "zookeeper"))]
            _ if !claimed => Ok(ReleaseReport::one_member(false, None)),
            // Boxed, so that a Redis guard's release does not carry the
            // etcd or ZooKeeper client's request state (see
            // `backend::etcd_guard`).
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => {
                let given = Box::pin(etcd::give_back(&hold.store, &self.held, &hold.keys));
                given
                    .await
                    .map(|kept_until| ReleaseReport::one_member(kept_until.is_none(), kept_until))
            }
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => {
                let given = Box::pin(zookeeper::give_back(&hold.store, &self.held, &hold.nodes));
                given.await.map(|()| ReleaseReport::one_member(true, None))
            }
        };
        self.released = true;
        metrics::hold(self.held.acquired_at().elapsed(), HoldEnd::Released);
        tracing::debug!(resources = ?self.resources(), ?report, "lock released");
        report
    }

    fn is_closed(&self) -> bool {
        match &self.store {
            Store::Redis { shared, .. } => shared.is_closed(),
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => hold.store.is_closed(),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => hold.store.is_closed(),
        }
    }

    /// The [`Error::Lost`] for this lock, with `confirmed` nodes
    /// ([`Error::Closed`] once the client shut down, which takes every lock).
    pub(crate) fn lost_error(&self, confirmed: usize) -> Error {
        match &self.store {
            Store::Redis { shared, .. } if shared.is_closed() => Error::Closed,
            Store::Redis { shared, .. } => Error::Lost {
                confirmed,
                quorum: shared.quorum.majority(),
                nodes: shared.quorum.len(),
            },
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => hold.store.lost(),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => hold.store.lost(),
        }
    }

    /// Nodes that confirmed our token in the last round: the acquisition,
    /// or the last renewal confirmed since (1 on etcd or ZooKeeper).
    pub fn last_confirmed(&self) -> usize {
        self.held.confirmed()
    }

    fn stop_renewal(&mut self) {
        match &mut self.store {
            Store::Redis { shared, renewal, .. } => {
                if let Some(id) = renewal.take() {
                    shared.watchdog.unregister(id);
                }
            }
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => hold.forget(),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => hold.forget(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop_renewal();
        match &self.store {
            Store::Redis { shared, holder, .. } => shared.holders.remove(*holder),
            // `stop_renewal` ended both registrations.
            #[cfg(any(feature = "etcd", feature = "zookeeper"))]
            _ => {}
        }
        if self.released || !self.held.claim_release() {
            return;
        }
        metrics::hold(self.held.acquired_at().elapsed(), HoldEnd::Released);
        // Never block in Drop.
        match &self.store {
            Store::Redis { shared, .. } => release_in_background(&shared.quorum, &self.held),
            #[cfg(feature = "etcd")]
            Store::Etcd(hold) => etcd::give_back_in_background(&hold.store, &self.held, &hold.keys),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper(hold) => {
                zookeeper::give_back_in_background(&hold.store, &self.held, &hold.nodes)
            }
        }
    }
}
