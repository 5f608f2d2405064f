//! The client ([`Redlock`]: `try_lock`, `lock`, `with_lock`) and the
//! resource names of a lock ([`Resources`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::builder::{Config, MAX_TTL, RedlockBuilder};
use crate::error::{Error, Result};
use crate::fence;
use crate::guard::{Guard, release_all};
use crate::handoff::{self, QueueEntry, Subscription};
use crate::keys;
use crate::options::LockOptions;
use crate::quorum::{self, Until};
use crate::random;
use crate::tasks::Work;
use crate::watchdog::Held;

/// A distributed lock client over N independent Redis nodes (Redlock).
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
    pub(crate) config: Arc<Config>,
    pub(crate) options: LockOptions,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.config.nodes)
            .field("quorum", &self.quorum())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// Starts configuring a client.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    pub(crate) fn from_config(config: Arc<Config>, options: LockOptions) -> Self {
        Redlock { config, options }
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
            config: Arc::clone(&self.config),
            options,
        })
    }

    /// Number of configured nodes.
    pub fn nodes(&self) -> usize {
        self.config.nodes.len()
    }

    /// Nodes that must agree for a lock to be held: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.nodes())
    }

    /// One attempt to take the lock on `resources`.
    ///
    /// Sends `SET NX PX` (or the all-or-nothing script for several resources)
    /// to every node at once and returns as soon as the outcome is certain.
    /// The lock is held for `ttl` minus the time the attempt took minus the
    /// clock drift allowance; see [`Guard::valid_until`].
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
        match self.attempt(&resources, ttl, None).await {
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
        let deadline = quorum::deadline_after(self.options.wait);
        let mut attempts = 0u32;
        let mut subscription: Option<Subscription> = None;
        // A waiter's attempt on one unfenced resource also queues it where
        // the resource is held, in the same command; other waiters register
        // with a command of their own.
        let folded = resources.names().len() == 1 && !self.options.fenced;
        // The last wake-up came from a release that named this waiter (and
        // took it off the queue there).
        let mut named = false;
        loop {
            attempts += 1;
            // Also after a named wake-up: if that attempt loses, the same
            // command put the waiter back in its old place.
            let entry = subscription
                .as_mut()
                .filter(|_| folded)
                .and_then(Subscription::entry);
            let error = match self.attempt(&resources, ttl, entry.as_ref()).await {
                Ok(guard) => {
                    // Off every queue: a queueing attempt leaves them itself
                    // (see `attempt`), and the releases that named this
                    // waiter popped it.
                    if let Some(subscription) = subscription.as_mut().filter(|_| named || entry.is_some()) {
                        subscription.served();
                    }
                    return Ok(guard);
                }
                Err(e @ (Error::Config(_) | Error::Closed)) => return Err(e),
                Err(e) => e,
            };
            if self.options.max_attempts.is_some_and(|max| attempts >= max) || Instant::now() >= deadline {
                return Err(error);
            }
            if matches!(error, Error::Held { .. }) && subscription.is_none() {
                // Contention: listen for releases and queue up, then try once
                // more at once, since the release may have come before we
                // listened.
                let config = &self.config;
                let mut joined = config
                    .handoff
                    .subscribe(
                        &config.nodes,
                        &config.tasks,
                        resources.names(),
                        config.node_timeout,
                        deadline,
                    )
                    .await;
                if !folded {
                    joined.register().await;
                }
                subscription = Some(joined);
                continue;
            }
            if let Some(subscription) = subscription.as_mut().filter(|_| named && !folded) {
                // Named by a release, but someone else got there first: back
                // to our old place at the front of the queue.
                subscription.register().await;
            }
            // Polling underneath the notifications, for releases by other
            // libraries, expired keys, lost messages and a queue head that is
            // gone; a queued waiter's turn comes by message.
            let delay = random::jitter(self.options.retry_delay);
            tracing::debug!(attempts, ?delay, %error, "lock attempt failed, waiting");
            let wake = quorum::deadline_after(delay).min(deadline);
            let closing = self.config.tasks.closing();
            // A shutdown ends the wait at once: the next attempt says so.
            named = match &subscription {
                Some(subscription) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(wake) => false,
                        () = subscription.released() => true,
                        () = closing.cancelled() => false,
                    }
                }
                None => {
                    tokio::select! {
                        () = tokio::time::sleep_until(wake) => {}
                        () = closing.cancelled() => {}
                    }
                    false
                }
            };
        }
    }

    /// Takes the lock (waiting as [`Redlock::lock`] does), runs `work` while
    /// holding it, and releases it: the Rust form of an `async with` block.
    ///
    /// With auto-renewal (the default) the lock is kept alive for as long as
    /// `work` runs. If the lock is lost first, `work`'s future is dropped at
    /// that point (it stops at its next `.await`) and the call returns
    /// [`Error::Lost`]. The lock is released at the end in every case; when
    /// `work` panics, the guard's drop releases it in the background.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`], plus [`Error::Lost`] ([`Error::Closed`] when
    /// the loss was a [`Redlock::shutdown`]). A release that fails after
    /// `work` completed is logged, not returned: the work is done.
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

    /// Checks that `ttl` leaves room for the per-node timeout and the drift,
    /// and returns it cut to whole milliseconds (the unit Redis stores, so
    /// the validity is computed from the ttl the nodes really apply) with its
    /// drift allowance.
    pub(crate) fn check_ttl(&self, requested: Duration) -> Result<(Duration, Duration)> {
        let ttl = Duration::from_millis(u64::try_from(requested.as_millis()).unwrap_or(u64::MAX));
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(Error::Config(format!(
                "ttl must be at least 1 ms and at most {MAX_TTL:?}, got {requested:?}"
            )));
        }
        let drift = self.drift(ttl);
        let (timeout, min) = (self.config.node_timeout, self.options.min_validity);
        if drift.saturating_add(timeout) >= ttl || min.saturating_add(drift) >= ttl {
            return Err(Error::Config(format!(
                "ttl {ttl:?} leaves no validity after the drift allowance {drift:?}, the node timeout \
                 {timeout:?} and the minimum validity {min:?}"
            )));
        }
        Ok((ttl, drift))
    }

    fn drift(&self, ttl: Duration) -> Duration {
        quorum::drift(ttl, self.config.drift_factor, self.config.drift_fixed)
    }

    /// One acquisition attempt.
    /// With `queue`, a waiter's attempt: where the resource is held, the
    /// waiter is queued for it (see `crate::handoff`).
    async fn attempt(
        &self,
        resources: &Resources,
        ttl: Duration,
        queue: Option<&QueueEntry>,
    ) -> Result<Guard> {
        let (ttl, drift) = self.check_ttl(ttl)?;
        if self.config.tasks.is_closed() {
            return Err(Error::Closed);
        }
        let token: Arc<str> = random::token().into();
        let keys = resources.names();
        let nodes = &self.config.nodes;
        let tasks = &self.config.tasks;
        let mut undo = Undo {
            config: &self.config,
            resources,
            token: &token,
            ttl,
            armed: true,
        };
        let start = Instant::now();
        let deadline = start + self.config.node_timeout;
        // Fenced: each node's fence value, folded into a running maximum.
        let fence_floor = self.options.fenced.then(|| Arc::new(AtomicU64::new(0)));
        // Shared by the per-node requests (a pointer each, not a copy: the
        // request futures are kept small, see `Node::acquire`).
        let shared_queue = queue.map(|entry| Arc::new(entry.clone()));
        let refusals = queue.map(|_| Arc::new(handoff::Refusals::default()));
        let valid_until = start + ttl - drift;
        // A waiter's requests are driven past the attempt's deadline, until
        // its validity would have ended: a refusal that comes late must still
        // take the waiter off that node's queue (see `handoff::Refusals`).
        let finish_by = if queue.is_some() { valid_until } else { deadline };
        let tally = quorum::fan_out(nodes, tasks, deadline, finish_by, Until::Decided, |i| {
            let (nodes, resources, token) = (Arc::clone(nodes), resources.clone(), Arc::clone(&token));
            // Only a waiter's attempt spawns work from the request itself.
            let tasks = queue.map(|_| Arc::clone(tasks));
            let (fence_floor, queue, refusals) =
                (fence_floor.clone(), shared_queue.clone(), refusals.clone());
            async move {
                let reply = nodes[i]
                    .acquire(
                        resources.names(),
                        &token,
                        ttl,
                        fence_floor.as_deref(),
                        queue.as_deref(),
                    )
                    .await;
                // A refusal queued the waiter there (see `handoff::Refusals`).
                // Boxed: the rare path stays out of every request's future.
                if let (Some(entry), Some(refusals), Some(tasks), Ok(Ok(false))) =
                    (&queue, &refusals, &tasks, &reply)
                    && refusals.refused(i)
                {
                    Box::pin(handoff::leave(&nodes, tasks, entry, &[i], valid_until)).await;
                }
                reply
            }
        })
        .await;
        let min = self.options.min_validity;
        let refused_by = tally.refused_by.clone();
        let failure = if tally.reached() {
            let fence = match &fence_floor {
                Some(floor) => fence::propose(&self.config, keys, floor.load(Ordering::Relaxed), valid_until)
                    .await
                    .map(Some),
                None => Ok(None),
            };
            let elapsed = start.elapsed();
            match (fence, quorum::validity(ttl, elapsed, drift)) {
                (Ok(fence), Some(left)) if left >= min => {
                    tracing::debug!(resources = ?keys, granted = tally.ok, ?fence, ?elapsed, ?left, "lock acquired");
                    if let (Some(entry), Some(refusals)) = (queue, &refusals) {
                        // The nodes that granted took the waiter off their
                        // queue in the same call; those that refused still
                        // list it.
                        handoff::leave(nodes, tasks, entry, &refusals.taken(), valid_until).await;
                    }
                    undo.armed = false;
                    drop(undo);
                    let held = Held::new(
                        resources.clone(),
                        token,
                        fence,
                        ttl,
                        start,
                        valid_until,
                        tally.ok,
                        &self.options,
                    );
                    let guard = Guard::new(self.clone(), held, self.options.auto_renew);
                    if self.config.tasks.is_closed() {
                        // Taken while a shutdown released every lock: give
                        // it back too (or find the shutdown did).
                        let _ = guard.release().await;
                        return Err(Error::Closed);
                    }
                    return Ok(guard);
                }
                (Err(e), _) => e,
                (Ok(_), _) => Error::ValidityUsedUp { elapsed, ttl, min },
            }
        } else if tally.failures_rule_out_majority() {
            tally.unreachable()
        } else {
            Error::Held {
                refused: tally.refused,
                nodes: tally.nodes,
                errors: tally.errors,
            }
        };
        tracing::debug!(resources = ?keys, elapsed = ?start.elapsed(), error = %failure, "lock attempt failed");
        // Every node gets the release: a node that has not answered yet
        // still gets it queued behind its SET on the same connection (so it
        // runs after the SET). The caller waits until a majority confirmed
        // (then no majority holds anything of ours), within what is left of
        // this attempt's budget, so a hung node cannot hold it past the
        // per-node timeout; the rest completes in the background. Nodes that
        // refused our SET hold nothing of ours and are skipped.
        release_all(
            &self.config,
            resources,
            &token,
            ttl,
            deadline,
            Until::Answered,
            &refused_by,
        )
        .await;
        undo.armed = false;
        Err(failure)
    }
}

/// Releases the keys of an attempt dropped before it finished (its caller
/// was cancelled: a timeout, a `select!`, a signal). Requests already handed
/// to the nodes' connections may still set our keys; the release, handed
/// over after them, runs after them on each node. Sent in the background
/// as tracked work (see [`Redlock::shutdown`]).
struct Undo<'a> {
    config: &'a Arc<Config>,
    resources: &'a Resources,
    token: &'a Arc<str>,
    ttl: Duration,
    /// Cleared once the attempt ends on its own: with a guard that owns the
    /// keys, or after its own release.
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (config, resources, token, ttl) = (
            Arc::clone(self.config),
            self.resources.clone(),
            Arc::clone(self.token),
            self.ttl,
        );
        self.config.tasks.spawn_if_running(Work::Release, async move {
            let deadline = Instant::now() + config.node_timeout;
            release_all(&config, &resources, &token, ttl, deadline, Until::All, &[]).await;
        });
    }
}

/// The resource names of one lock: one key per resource on every node.
///
/// Built from a `&str`, a `String`, or a list of them (a multi-resource lock,
/// taken all-or-nothing on each node). Names are used as Redis keys as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources(Arc<[String]>);

impl Resources {
    /// The names, in the order given.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Checks the names: at least one and at most [`MAX_RESOURCES`], none
    /// empty, none twice, none in the reserved namespace
    /// ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)).
    fn validated(self) -> Result<Self> {
        if self.0.is_empty() {
            return Err(Error::Config("no resource given".into()));
        }
        if self.0.len() > MAX_RESOURCES {
            return Err(Error::Config(format!(
                "{} resources in one lock, at most {MAX_RESOURCES}",
                self.0.len()
            )));
        }
        let mut seen = std::collections::HashSet::with_capacity(self.0.len());
        for name in self.0.iter() {
            if name.is_empty() {
                return Err(Error::Config("empty resource name".into()));
            }
            if keys::is_reserved(name) {
                return Err(Error::Config(format!(
                    "resource {name:?} is in quorumlock's reserved namespace {:?}",
                    keys::RESERVED_PREFIX
                )));
            }
            if !seen.insert(name.as_str()) {
                return Err(Error::Config(format!("resource {name:?} given twice")));
            }
        }
        Ok(self)
    }
}

/// Most resources one lock may take.
///
/// Each node takes all of a lock's keys in one script call, and Redis serves
/// nobody else while a script runs: the bound keeps every such call (acquire,
/// release, extend, a renewal's share, the hand-off queues) a short, constant
/// amount of work. 64 covers an order with a line per item; more resources
/// than that are better locked under one coarser name.
pub const MAX_RESOURCES: usize = 64;

// The scripts' documented bounds assume no lock has more keys than this.
const _: () = assert!(MAX_RESOURCES <= crate::scripts::MAX_LOCK_KEYS);

impl From<&str> for Resources {
    fn from(name: &str) -> Self {
        Resources(Arc::new([name.to_owned()]))
    }
}

impl From<String> for Resources {
    fn from(name: String) -> Self {
        Resources(Arc::new([name]))
    }
}

impl From<&String> for Resources {
    fn from(name: &String) -> Self {
        Resources::from(name.as_str())
    }
}

impl<S: AsRef<str>> From<&[S]> for Resources {
    fn from(names: &[S]) -> Self {
        Resources(names.iter().map(|n| n.as_ref().to_owned()).collect())
    }
}

impl<S: AsRef<str>, const N: usize> From<[S; N]> for Resources {
    fn from(names: [S; N]) -> Self {
        Resources::from(&names[..])
    }
}

impl<S: AsRef<str>> From<Vec<S>> for Resources {
    fn from(names: Vec<S>) -> Self {
        Resources::from(&names[..])
    }
}
