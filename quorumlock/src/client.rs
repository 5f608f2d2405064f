//! The client: [`Redlock`] with `try_lock`, `lock` and `with_lock`.

use std::fmt;
use std::time::Duration;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::resources::Resources;
use crate::options::LockOptions;

/// A distributed lock client over N independent Redis nodes (Redlock), or,
/// with the `etcd` feature and an `etcd://` node URL, over one etcd cluster,
/// or, with the `zookeeper` feature and a `zk://` node URL, over one
/// ZooKeeper ensemble (see [`RedlockBuilder::node`](crate::RedlockBuilder::node)):
/// the same calls, guards and errors on each.
///
/// Cheap to clone (an `Arc`); clones share connections and settings. Create
/// it once with [`Redlock::builder`] and use it from any task. Connections are
/// opened on first use, inside the runtime that uses them.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// let redlock = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .build()?;
/// match redlock.try_lock("archive:nightly", Duration::from_secs(30)).await? {
///     Some(guard) => {
///         // Only one process in the fleet gets here at a time.
///         guard.release().await?;
///     }
///     None => println!("another instance is archiving"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    pub(crate) backend: Backend,
    pub(crate) options: LockOptions,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("backend", &self.backend)
            .field("quorum", &self.quorum())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    pub(crate) fn new(backend: Backend, options: LockOptions) -> Self {
        Redlock { backend, options }
    }

    /// The lock settings this client uses (a copy, to modify and pass to
    /// [`Redlock::with_options`]).
    pub fn options(&self) -> LockOptions {
        self.options.clone()
    }

    /// A client on the same nodes, connections and watchdog, with other lock
    /// settings (auto-renewal, waiting, hold limits).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid options (zero attempts).
    pub fn with_options(&self, options: LockOptions) -> Result<Redlock> {
        options.validate()?;
        Ok(Redlock {
            backend: self.backend.clone(),
            options,
        })
    }

    /// Number of configured nodes (independent quorum members): the Redis
    /// nodes, or 1 for an etcd cluster or a ZooKeeper ensemble, which keeps
    /// its own quorum.
    pub fn nodes(&self) -> usize {
        self.backend.members()
    }

    /// Nodes that must agree for a lock to be held: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.backend.majority()
    }

    /// One attempt to take the lock on `resources`.
    ///
    /// On Redis nodes: sends `SET NX PX` (or the all-or-nothing script for
    /// several resources) to every node at once and returns as soon as the
    /// outcome is certain. On etcd: creates a key per resource under a
    /// fresh lease, as `concurrency.Mutex` does, and finds it first in line.
    /// On ZooKeeper: creates an ephemeral sequential node per resource, as
    /// the lock recipe does, and finds it first in line. The lock is held
    /// for `ttl` minus the time the attempt took minus the clock drift
    /// allowance; see [`Guard::valid_until`].
    ///
    /// Returns `Ok(None)` when the resource is busy: another owner's keys
    /// (with any failed nodes) rule out a majority, while the failed nodes
    /// alone would not have (one node of three down for maintenance does not
    /// turn a held lock into an outage). After any failed attempt the keys
    /// this attempt may have set are deleted on every node (owner-checked).
    ///
    /// # Errors
    ///
    /// - [`Error::Unreachable`] when the failing nodes alone kept the attempt
    ///   from a majority (an outage); it lists each node's error.
    /// - [`Error::ValidityUsedUp`] when a majority was reached too late.
    /// - [`Error::Config`] for a zero ttl, a ttl not larger than the per-node
    ///   timeout plus the drift allowance, or empty or duplicate resources.
    /// - [`Error::Closed`] after [`Redlock::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future undoes the attempt in flight (its
    /// release is sent in the background, as tracked work that
    /// [`Redlock::shutdown`] waits for), so it leaves no key of ours.
    pub async fn try_lock(&self, resources: impl Into<Resources>, ttl: Duration) -> Result<Option<Guard>> {
        let resources = resources.into().validated()?;
        match self.backend.try_lock(&self.options, &resources, ttl).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Held { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Takes the lock on `resources`, retrying until it succeeds or the
    /// client's wait ([`LockOptions::wait`]) or attempt budget
    /// ([`LockOptions::max_attempts`]) runs out.
    ///
    /// Attempts are spaced by a random delay around
    /// [`LockOptions::retry_delay`], so that competing clients do not
    /// collide forever.
    ///
    /// # Errors
    ///
    /// The last attempt's error when the budget runs out: [`Error::Held`] when
    /// another owner still held the resource, [`Error::Unreachable`] or
    /// [`Error::ValidityUsedUp`] otherwise. [`Error::Config`] at once for bad
    /// input (see [`Redlock::try_lock`]).
    ///
    /// # Cancel safety
    ///
    /// As for [`Redlock::try_lock`].
    pub async fn lock(&self, resources: impl Into<Resources>, ttl: Duration) -> Result<Guard> {
        let resources = resources.into().validated()?;
        self.backend.lock(&self.options, &resources, ttl).await
    }

    /// Takes the lock (waiting as [`Redlock::lock`] does), runs `work` while
    /// holding it, and releases it: the Rust form of an `async with` block.
    ///
    /// `work` starts only while the lock has more validity left than its
    /// first renewal needs ([`Guard::start_deadline`]): when the thread was
    /// held up between taking the lock and starting `work` for so long that
    /// the validity ran out, `work` never runs and the lock is given back.
    /// With auto-renewal (the default) the lock is kept alive for as long as
    /// `work` runs. If the lock is lost first, `work`'s future is dropped at
    /// that point (it stops at its next `.await`) and the call returns
    /// [`Error::Lost`]. The lock is released at the end in every case; when
    /// `work` panics, the guard's drop releases it in the background.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`], plus [`Error::Lost`] ([`Error::Closed`] when
    /// the loss was a [`Redlock::shutdown`]), also when the lock was lost
    /// before `work` could start. [`Error::ValidityUsedUp`] when less than
    /// the start margin was left ([`Guard::start_deadline`]); `work` did not
    /// run. A release that fails after `work` completed is logged, not
    /// returned: the work is done.
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
    /// let archived = redlock
    ///     .with_lock("archive:nightly", Duration::from_secs(30), async |guard| {
    ///         // Runs on one instance of the fleet at a time; dropped if the lock is lost.
    ///         println!("holding {:?}", guard.resources());
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(archived, 42);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F, T>(&self, resources: impl Into<Resources>, ttl: Duration, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&Guard) -> T,
    {
        let guard = self.lock(resources, ttl).await?;
        hold_while(guard, work).await
    }

    /// [`Redlock::with_lock`] that does not wait: one attempt, and
    /// `Ok(None)` (without running `work`) when another owner holds the
    /// resource. The scoped form of [`Redlock::try_lock`], for work that
    /// should simply be skipped while someone else does it.
    ///
    /// Once the lock is taken, everything is as in [`Redlock::with_lock`]:
    /// `work` starts only with enough validity left, is renewed for as long
    /// as it runs (with auto-renewal), dropped when the lock is lost
    /// ([`Error::Lost`]), and the lock is released at the end in every case.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`], plus [`Error::Lost`] ([`Error::Closed`] when
    /// the loss was a [`Redlock::shutdown`]) and [`Error::ValidityUsedUp`]
    /// as in [`Redlock::with_lock`].
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
    /// let ran = redlock
    ///     .try_with_lock("report:daily", Duration::from_secs(60), async |_guard| {
    ///         // Builds the report, unless another instance is already at it.
    ///     })
    ///     .await?;
    /// if ran.is_none() {
    ///     println!("another instance is building the report");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_with_lock<F, T>(
        &self,
        resources: impl Into<Resources>,
        ttl: Duration,
        work: F,
    ) -> Result<Option<T>>
    where
        F: AsyncFnOnce(&Guard) -> T,
    {
        match self.try_lock(resources, ttl).await? {
            Some(guard) => hold_while(guard, work).await.map(Some),
            None => Ok(None),
        }
    }
}

/// Runs `work` while `guard` holds the lock, dropping it when the lock is
/// lost first, and releases the lock at the end (see [`Redlock::with_lock`]).
async fn hold_while<F, T>(guard: Guard, work: F) -> Result<T>
where
    F: AsyncFnOnce(&Guard) -> T,
{
    // The work never starts on a lock whose validity ran out (or nearly)
    // since it was taken: its first step could not be stopped.
    if let Err(error) = guard.check_start() {
        drop(guard);
        return Err(error);
    }
    let outcome = {
        let work = work(&guard);
        tokio::select! {
            // Work that completed wins over a loss seen in the same poll:
            // its effects have happened.
            biased;
            value = work => Some(value),
            () = guard.lost() => None,
        }
    };
    match outcome {
        Some(value) => {
            if let Err(error) = guard.release().await {
                tracing::warn!(%error, "release after with_lock failed; the keys expire with their ttl");
            }
            Ok(value)
        }
        None => {
            let error = guard.lost_error(guard.last_confirmed());
            drop(guard);
            Err(error)
        }
    }
}
