//! The client ([`Redlock`]: `try_lock`, `lock`) and the held lock ([`Guard`]:
//! `extend`, `release`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::builder::{Config, RedlockBuilder};
use crate::error::{Error, Result};
use crate::quorum::{self, Tally, Until};

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
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.config.nodes)
            .field("quorum", &self.quorum())
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// Starts configuring a client.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    pub(crate) fn from_config(config: Arc<Config>) -> Self {
        Redlock { config }
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
    /// Returns `Ok(None)` when another owner holds the resource on enough
    /// nodes to rule out a majority. After any failed attempt the keys this
    /// attempt may have set are deleted on every node (owner-checked).
    ///
    /// # Errors
    ///
    /// - [`Error::Unreachable`] when failing nodes (not contention) kept the
    ///   attempt from a majority; it lists each node's error.
    /// - [`Error::ValidityUsedUp`] when a majority was reached too late.
    /// - [`Error::Config`] for a zero ttl, a ttl not larger than the per-node
    ///   timeout plus the drift allowance, or empty or duplicate resources.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave keys set on some nodes until their ttl
    /// runs out; they block other owners no longer than `ttl`.
    pub async fn try_lock(&self, resources: impl Into<Resources>, ttl: Duration) -> Result<Option<Guard>> {
        let resources = resources.into().validated()?;
        match self.attempt(&resources, ttl).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Held { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Takes the lock on `resources`, retrying until it succeeds or the
    /// client's wait ([`RedlockBuilder::wait`]) or attempt budget
    /// ([`RedlockBuilder::max_attempts`]) runs out.
    ///
    /// Attempts are spaced by a random delay around
    /// [`RedlockBuilder::retry_delay`], so that competing clients do not
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
        let deadline = Instant::now() + self.config.wait;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let error = match self.attempt(&resources, ttl).await {
                Ok(guard) => return Ok(guard),
                Err(e @ Error::Config(_)) => return Err(e),
                Err(e) => e,
            };
            let delay = self.retry_delay();
            let out_of_attempts = self.config.max_attempts.is_some_and(|max| attempts >= max);
            if out_of_attempts || Instant::now() + delay > deadline {
                return Err(error);
            }
            tracing::debug!(attempts, ?delay, %error, "lock attempt failed, retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// A delay uniformly spread over `[retry_delay / 2, retry_delay * 3 / 2)`.
    fn retry_delay(&self) -> Duration {
        let base = self.config.retry_delay;
        base / 2 + base.mul_f64(rand::random::<f64>())
    }

    /// Checks that `ttl` leaves room for the per-node timeout and the drift,
    /// and returns it cut to whole milliseconds (the unit Redis stores, so
    /// the validity is computed from the ttl the nodes really apply) with its
    /// drift allowance.
    pub(crate) fn check_ttl(&self, requested: Duration) -> Result<(Duration, Duration)> {
        let ttl = Duration::from_millis(u64::try_from(requested.as_millis()).unwrap_or(u64::MAX));
        if ttl.is_zero() {
            return Err(Error::Config(format!(
                "ttl must be at least 1 ms, got {requested:?}"
            )));
        }
        let drift = self.drift(ttl);
        let config = &self.config;
        if drift + config.node_timeout >= ttl || config.min_validity + drift >= ttl {
            return Err(Error::Config(format!(
                "ttl {ttl:?} leaves no validity after the drift allowance {drift:?}, the node timeout {:?} \
                 and the minimum validity {:?}",
                config.node_timeout, config.min_validity
            )));
        }
        Ok((ttl, drift))
    }

    fn drift(&self, ttl: Duration) -> Duration {
        quorum::drift(ttl, self.config.drift_factor, self.config.drift_fixed)
    }

    /// One acquisition attempt.
    async fn attempt(&self, resources: &Resources, ttl: Duration) -> Result<Guard> {
        let (ttl, drift) = self.check_ttl(ttl)?;
        let token: Arc<str> = new_token().into();
        let keys = resources.names();
        let nodes = &self.config.nodes;
        let start = Instant::now();
        let deadline = start + self.config.node_timeout;
        let tally = quorum::fan_out(nodes, deadline, deadline, Until::Decided, |i| {
            let (nodes, resources, token) = (Arc::clone(nodes), resources.clone(), Arc::clone(&token));
            async move { nodes[i].acquire(resources.names(), &token, ttl).await }
        })
        .await;
        let elapsed = start.elapsed();
        let failure = if tally.reached() {
            match quorum::validity(ttl, elapsed, drift) {
                Some(left) if left >= self.config.min_validity => {
                    tracing::debug!(resources = ?keys, granted = tally.ok, ?elapsed, ?left, "lock acquired");
                    return Ok(Guard {
                        redlock: self.clone(),
                        resources: resources.clone(),
                        token,
                        ttl,
                        valid_until: start + ttl - drift,
                        released: false,
                    });
                }
                _ => Error::ValidityUsedUp {
                    elapsed,
                    ttl,
                    min: self.config.min_validity,
                },
            }
        } else if tally.refused_by_majority() {
            Error::Held {
                refused: tally.refused,
                nodes: tally.nodes,
            }
        } else {
            tally.unreachable()
        };
        tracing::debug!(resources = ?keys, ?elapsed, error = %failure, "lock attempt failed");
        // Every node gets the release, within what is left of this attempt's
        // budget: a node that has not answered yet still gets it queued
        // behind its SET on the same connection (so it runs after the SET),
        // and a hung node cannot hold the caller past the per-node timeout.
        release_all(&self.config, resources, &token, ttl, deadline).await;
        Err(failure)
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

    fn validated(self) -> Result<Self> {
        if self.0.is_empty() {
            return Err(Error::Config("no resource given".into()));
        }
        for (i, name) in self.0.iter().enumerate() {
            if name.is_empty() {
                return Err(Error::Config("empty resource name".into()));
            }
            if self.0[..i].contains(name) {
                return Err(Error::Config(format!("resource {name:?} given twice")));
            }
        }
        Ok(self)
    }
}

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

/// A held lock.
///
/// The lock is only trustworthy until [`Guard::valid_until`]; extend it with
/// [`Guard::extend`] for longer work, and give it back with
/// [`Guard::release`]. Dropping a guard without releasing it sends the
/// release in the background when a Tokio runtime is running (it never
/// blocks), and otherwise leaves the keys to expire after their ttl.
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard {
    redlock: Redlock,
    resources: Resources,
    token: Arc<str>,
    /// The ttl the keys were last set or extended with.
    ttl: Duration,
    valid_until: Instant,
    released: bool,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("resources", &self.resources.names())
            .field("valid_until", &self.valid_until)
            .finish_non_exhaustive()
    }
}

/// What [`Guard::release`] achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Nodes configured.
    pub nodes: usize,
    /// Nodes that answered: our token is no longer there.
    pub confirmed: usize,
    /// Of those, nodes where our token was still present and was deleted
    /// (the others had already expired or lost it).
    pub deleted: usize,
}

impl Guard {
    /// The locked resource names.
    pub fn resources(&self) -> &[String] {
        self.resources.names()
    }

    /// The random token (128 bits, hex) stored as the keys' value.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The instant until which the lock is guaranteed to be ours, on the
    /// monotonic clock: `start + ttl - drift`, where `start` was taken before
    /// the first request went out. After it, another owner may hold the lock.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Time left until [`Guard::valid_until`] (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Resets the lock's ttl to `ttl` on every node that still holds our
    /// token, and moves [`Guard::valid_until`] to `start + ttl - drift`.
    ///
    /// Succeeds only when a majority of all nodes confirmed before the current
    /// validity ran out. A failed extend never deletes anything: the lock
    /// stays valid until the old [`Guard::valid_until`].
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] when the validity had already passed, or when so many
    ///   nodes no longer hold our token that no majority can.
    /// - [`Error::Unreachable`] when failing nodes kept the extend from a
    ///   majority in time.
    /// - [`Error::ValidityUsedUp`] when the new validity is below the minimum.
    /// - [`Error::Config`] for a ttl the client rejects (see
    ///   [`Redlock::try_lock`]).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        let config = &self.redlock.config;
        let (ttl, drift) = self.redlock.check_ttl(ttl)?;
        let start = Instant::now();
        let nodes = config.nodes.len();
        if start >= self.valid_until {
            return Err(Error::Lost {
                confirmed: 0,
                quorum: quorum::quorum(nodes),
                nodes,
            });
        }
        // Confirmations count only if they arrive while the lock is still ours.
        let deadline = (start + config.node_timeout).min(self.valid_until);
        let keys = self.resources.names();
        let tally = quorum::fan_out(&config.nodes, deadline, deadline, Until::Decided, |i| {
            let (nodes, resources, token) = (
                Arc::clone(&config.nodes),
                self.resources.clone(),
                Arc::clone(&self.token),
            );
            async move { nodes[i].extend(resources.names(), &token, ttl).await }
        })
        .await;
        let elapsed = start.elapsed();
        if !tally.reached() {
            tracing::debug!(resources = ?keys, ?tally, "extend failed");
            return Err(if tally.refused_by_majority() {
                Error::Lost {
                    confirmed: tally.ok,
                    quorum: tally.quorum(),
                    nodes,
                }
            } else {
                tally.unreachable()
            });
        }
        match quorum::validity(ttl, elapsed, drift) {
            Some(left) if left >= config.min_validity => {
                self.valid_until = start + ttl - drift;
                self.ttl = self.ttl.max(ttl);
                tracing::debug!(resources = ?keys, ?left, "lock extended");
                Ok(())
            }
            _ => Err(Error::ValidityUsedUp {
                elapsed,
                ttl,
                min: config.min_validity,
            }),
        }
    }

    /// Deletes the lock's keys on every node, owner-checked, concurrently.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when fewer than a majority of nodes answered:
    /// the lock may then block other owners until its ttl runs out.
    pub async fn release(mut self) -> Result<ReleaseReport> {
        self.released = true;
        let config = &self.redlock.config;
        let deadline = Instant::now() + config.node_timeout;
        let tally = release_all(config, &self.resources, &self.token, self.ttl, deadline).await;
        let report = ReleaseReport {
            nodes: tally.nodes,
            confirmed: tally.ok + tally.refused,
            deleted: tally.ok,
        };
        if report.confirmed >= tally.quorum() {
            Ok(report)
        } else {
            Err(tally.unreachable())
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // Never block in Drop: hand the release to the runtime if there is one.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let config = Arc::clone(&self.redlock.config);
            let resources = self.resources.clone();
            let (token, ttl) = (Arc::clone(&self.token), self.ttl);
            runtime.spawn(async move {
                let deadline = Instant::now() + config.node_timeout;
                release_all(&config, &resources, &token, ttl, deadline).await;
            });
        }
    }
}

/// Owner-checked delete of `resources` on every node, waiting for answers
/// until `deadline`. `ok` counts nodes where our token was deleted, `refused`
/// nodes where it was already gone.
///
/// A node that has not answered by the deadline keeps its release going in
/// the background for up to `ttl` (after which the key has expired anyway),
/// so that it still runs behind a late SET of ours queued on that node.
async fn release_all(
    config: &Config,
    resources: &Resources,
    token: &Arc<str>,
    ttl: Duration,
    deadline: Instant,
) -> Tally {
    let finish_by = deadline.max(Instant::now() + ttl);
    quorum::fan_out(&config.nodes, deadline, finish_by, Until::All, |i| {
        let (nodes, resources, token) = (Arc::clone(&config.nodes), resources.clone(), Arc::clone(token));
        async move { Ok(nodes[i].release(resources.names(), &token).await? > 0) }
    })
    .await
}

/// A fresh lock token: 128 bits from the thread-local CSPRNG, as 32 hex digits.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}
