//! Idempotency keys: run an operation at most once per key across processes,
//! store its result, and give that result to every later caller.
//!
//! # Protocol
//!
//! One call of [`Idempotency::run`] goes through up to three steps, each a
//! concurrent fan-out to every node through `Quorum::fan_out`, bounded by
//! the client's per-node timeout:
//!
//! 1. **Claim.** The [`CLAIM`](crate::backend::redlock::wire::idempotency::CLAIM) script sets the key to our
//!    in-progress marker (`pending:` and a fresh 128-bit token) with the
//!    caller's ttl when the key is free, and otherwise returns what the key
//!    holds. Unlike a lock attempt, the claim waits for every node (up to the
//!    per-node timeout) instead of stopping at a majority: a result on *any*
//!    node is final, and a node that has it may be the last to answer. The
//!    cost is that a hung node (not a dead one, which refuses the connection
//!    at once) adds the per-node timeout to every call. The key is ours when
//!    our marker is on a majority of all nodes and the claim left validity
//!    (`ttl - elapsed - drift`, as for a lock).
//! 2. **Run** the operation, once, in this task.
//! 3. **StoreRecord.** The [`STORE`](crate::backend::redlock::wire::idempotency::STORE) script replaces our marker by
//!    the record `done:<result>` with the result ttl, only on nodes that still
//!    hold our marker, again waiting for every node up to the per-node
//!    timeout (so the result is on every node that can take it, and a
//!    partial store is counted exactly). A majority must confirm. A failed
//!    operation instead has its marker deleted (owner-checked, the lock's
//!    release script), or, when failures are cached, stored as
//!    `failed:<message>` like a result.
//!
//! Every value this module writes starts with `pending:`, `done:` or
//! `failed:`, so a result can never be taken for a marker, whatever bytes the
//! operation returned. A value with none of these prefixes is someone else's
//! data under the same key: an [`Error::Config`], not a guess.
//!
//! # Why a result on one node is enough for a reader
//!
//! Results are written only by the owner of the marker, and only after its
//! operation succeeded, so a result anywhere means the operation ran and
//! this is its outcome: a reader returns it without looking further. A
//! stored result and a reader's claim that reached a majority always share a
//! node (two majorities of the same nodes intersect), so once a result is on
//! a majority, every claim that could run the operation sees it first.
//!
//! # What happens when nodes fail at each step
//!
//! - **Claim reaches no majority** (nodes down, slow or split between
//!   contenders): the operation does not run. Our markers are deleted on
//!   every node (owner-checked); a node that answers late still gets the
//!   delete queued behind our claim on its connection, and anything left
//!   expires after `ttl`. The caller gets [`IdempotencyError::InProgress`] when other
//!   callers' markers alone rule out a majority, [`Error::Unreachable`]
//!   otherwise. A waiting caller keeps polling until its wait runs out.
//! - **A node fails while the operation runs**: nothing happens until the
//!   store; the markers on the surviving majority keep other callers out.
//! - **The caller crashes while the operation runs** (process killed, future
//!   dropped, panic): the marker stays and blocks other callers until `ttl`
//!   passes; then the next caller claims the key and runs the operation
//!   again. That is the retry a crashed caller needs, and also why `ttl`
//!   must exceed the operation's longest run: markers are not renewed.
//! - **The result reaches only a minority** (nodes died or timed out during
//!   the store): the caller gets [`IdempotencyError::ResultNotStored`] with the result,
//!   and the operation is *not* run again. Our markers are left in place on
//!   the nodes that did not take the result, so until `ttl` passes other
//!   callers see the result (on a node that has it) or [`IdempotencyError::InProgress`].
//!   After that, a caller that reaches a node with the result gets it; one
//!   that reaches a majority of nodes without it claims the key and runs the
//!   operation again. That second run is the price of an outage at exactly
//!   this moment; the error tells the first caller so.
//! - **The operation outlives its marker** (it ran longer than `ttl - drift`):
//!   another caller may already have claimed the key and started the
//!   operation a second time; the store's owner check then refuses to
//!   overwrite that caller's marker, and the first caller gets
//!   [`IdempotencyError::ResultNotStored`] (its `refused` count says why).
//! - **A node restarts without persistence** and loses markers or results:
//!   a result still wins as long as any node that has it answers the claim.
//!   A marker, like a lock, keeps others out only while no majority of nodes
//!   lacks it: losing it on more than `nodes - quorum` nodes lets another
//!   caller run the operation while the first still runs it. Run nodes with
//!   `appendfsync always`.
//! - **A failed operation's marker cannot be deleted** on some node: it
//!   expires after `ttl`; until then that node counts as "in progress".

mod error;
mod rounds;

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use self::error::IdempotencyError;
use self::rounds::Claim;
use crate::backend::redlock::quorum::Quorum;
use crate::backend::redlock::wire::idempotency as wire_idempotency;
use crate::backend::redlock::wire::keys;
use crate::client::Redlock;
use crate::config::{DEFAULT_RESULT_TTL, MAX_TTL};
use crate::error::{Error, Result, Setting};

/// Runs an operation at most once per key across processes, and gives its
/// stored result to every later caller (idempotency keys).
///
/// A lock keeps two callers from running at the same time; an idempotency
/// key keeps the second caller from running at all: a client that retries a
/// payment, a queue that delivers a message twice, or a user who clicks
/// twice gets the first call's result instead of a second charge.
///
/// The first caller of [`Idempotency::run`] for a key marks it in progress on
/// a majority of nodes, runs the operation and replaces the marker by the
/// result, kept for [`Idempotency::result_ttl`]. Concurrent callers wait for
/// that result (up to [`Idempotency::wait`]) or, with
/// [`Idempotency::no_wait`], get [`IdempotencyError::InProgress`] at once. A failed
/// operation is not stored unless [`Idempotency::cache_failures`] is on, so a
/// retry runs it again. A caller that crashes mid-operation blocks others
/// only until its marker's `ttl` passes; then the operation can run again.
///
/// It uses the nodes, per-node timeout, drift allowance and quorum of the
/// [`Redlock`] it was made from, and works the same on one node or many.
///
/// Keys are used as Redis keys as given: namespace them (`idem:charge:{id}`)
/// so they never meet lock resources or other data. Cheap to clone.
///
/// # Examples
///
/// An HTTP handler that must charge a card once per `Idempotency-Key`:
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::{Error, IdempotencyError, Redlock};
///
/// # async fn charge_card() -> Result<String, std::io::Error> { Ok(String::new()) }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let redlock = Redlock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .build()?;
/// let charges = redlock.idempotency().no_wait();
///
/// let request_key = "5c0f3e1a-9d2b-4c6e-8f7a-1b2c3d4e5f60"; // from the request header
/// let key = format!("idem:charge:{request_key}");
/// match charges.run_string(&key, Duration::from_secs(60), charge_card).await {
///     Ok(receipt) => println!("200 OK {receipt}"),
///     Err(IdempotencyError::InProgress { .. }) => println!("409 Conflict: the first request is still running"),
///     Err(IdempotencyError::OperationFailed(e)) => println!("402 Payment Required: {e}"),
///     // Charged, but the receipt is not safely stored: answer, and alert.
///     Err(IdempotencyError::ResultNotStored { output, .. }) => {
///         println!("200 OK {}", String::from_utf8_lossy(&output))
///     }
///     Err(e) => println!("503 Service Unavailable: {e}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct Idempotency {
    redlock: Redlock,
    result_ttl: Duration,
    wait: Duration,
    cache_failures: bool,
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("nodes", &self.redlock.nodes())
            .field("result_ttl", &self.result_ttl)
            .field("wait", &self.wait)
            .field("cache_failures", &self.cache_failures)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// Idempotency keys over this client's nodes; the same as
    /// [`Idempotency::new`].
    pub fn idempotency(&self) -> Idempotency {
        Idempotency::new(self)
    }
}

impl Idempotency {
    /// Idempotency keys over the nodes of `redlock`, with its per-node
    /// timeout, drift allowance, retry delay and wait. Does not connect.
    pub fn new(redlock: &Redlock) -> Self {
        Idempotency {
            redlock: redlock.clone(),
            result_ttl: DEFAULT_RESULT_TTL,
            wait: redlock.options.wait,
            cache_failures: false,
        }
    }

    /// How long a stored result (or cached failure) is kept; after it, the
    /// key is free and the operation can run again. The default is
    /// [`DEFAULT_RESULT_TTL`]. Must be at least 1 ms ([`Error::Config`] from
    /// [`Idempotency::run`] otherwise).
    pub fn result_ttl(mut self, ttl: Duration) -> Self {
        self.result_ttl = ttl;
        self
    }

    /// How long a caller that finds the operation in progress elsewhere
    /// waits for its result, polling with a jittered backoff that starts at
    /// an eighth of the client's retry delay and doubles up to it. The
    /// default is the client's wait ([`RedlockBuilder::wait`], 10 s unless
    /// set). When the wait runs out the caller gets the last poll's error,
    /// usually [`IdempotencyError::InProgress`]. If the other caller's marker expires
    /// meanwhile (it crashed) or its operation failed uncached, the waiting
    /// caller claims the key and runs the operation itself.
    ///
    /// [`RedlockBuilder::wait`]: crate::RedlockBuilder::wait
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Never wait: a caller that finds the operation in progress elsewhere
    /// (or cannot reach a majority) gets the error at once. The same as
    /// `wait(Duration::ZERO)`.
    pub fn no_wait(self) -> Self {
        self.wait(Duration::ZERO)
    }

    /// Also store failures: when the operation returns an error, its message
    /// is kept for [`Idempotency::result_ttl`] and later callers get
    /// [`IdempotencyError::CachedFailure`] instead of running the operation again. For
    /// operations whose failure is itself a final answer (a declined card).
    /// The default is off: a failed operation frees the key at once.
    pub fn cache_failures(mut self, cache: bool) -> Self {
        self.cache_failures = cache;
        self
    }

    /// Runs `op` unless it already ran for `key`, and returns its result.
    ///
    /// The first caller for a key marks it in progress for `ttl` on a
    /// majority of nodes, runs `op` and stores what it returns (as bytes),
    /// replacing the marker. A later caller gets the stored result without
    /// running `op`. A caller that finds the key in progress waits for the
    /// result (see [`Idempotency::wait`]). `op` is called at most once per
    /// call of `run`, and at most once per key across all callers unless a
    /// marker expires first (`ttl` must cover the operation's longest run)
    /// or nodes fail while the result is stored (see
    /// [`IdempotencyError::ResultNotStored`]).
    ///
    /// # Errors
    ///
    /// - [`IdempotencyError::InProgress`] when another caller holds the key and the wait
    ///   ran out (or there is none).
    /// - [`IdempotencyError::OperationFailed`] when `op` ran in this call and failed;
    ///   [`IdempotencyError::CachedFailure`] when it failed in an earlier call that
    ///   cached the failure ([`Idempotency::cache_failures`]).
    /// - [`IdempotencyError::ResultNotStored`] when `op` succeeded but its result reached
    ///   fewer than a majority of nodes; the error carries the result.
    /// - [`Error::Unreachable`] when failing nodes kept the claim from a
    ///   majority (`op` did not run), [`Error::ValidityUsedUp`] when the claim
    ///   took longer than `ttl` allows.
    /// - [`Error::Config`] for an empty key, a `ttl` the client rejects (zero,
    ///   or not larger than the per-node timeout plus the drift allowance), a
    ///   result ttl under 1 ms, or a key that holds a value this module did
    ///   not write.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future counts as a crash: a marker it set stays until
    /// `ttl` runs out and keeps other callers out until then, since `op` may
    /// have done part of its work. Dropped while the result is being stored,
    /// the result may be on some nodes only.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::Redlock;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
    /// let jobs = redlock.idempotency().result_ttl(Duration::from_secs(3600));
    /// let pdf = jobs
    ///     .run("idem:render:invoice-1001", Duration::from_secs(120), || async {
    ///         // Render once, however many workers got the message.
    ///         Ok::<_, std::io::Error>(b"%PDF-1.7 ...".to_vec())
    ///     })
    ///     .await?;
    /// assert!(pdf.starts_with(b"%PDF"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<F, Fut, T, E>(
        &self,
        key: &str,
        ttl: Duration,
        op: F,
    ) -> Result<Vec<u8>, IdempotencyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        T: Into<Vec<u8>>,
        E: Into<Box<dyn StdError + Send + Sync>>,
    {
        let masters = self.redlock.backend.redlock("idempotency keys")?;
        let quorum = &masters.quorum;
        let ttl = self.check(quorum, key, ttl)?;
        let keys: Arc<[String]> = Arc::new([key.to_owned()]);
        let owner = match self.claim_or_wait(quorum, &keys, ttl).await? {
            Claim::Owned(owner) => owner,
            Claim::Done(output) => return Ok(output),
            Claim::Failed(message) => return Err(IdempotencyError::CachedFailure { message }),
        };
        match op().await {
            Ok(output) => self.store_result(quorum, &owner, output.into()).await,
            Err(e) => {
                let error: Arc<dyn StdError + Send + Sync> = Arc::from(e.into());
                if self.cache_failures {
                    let record = wire_idempotency::failed(&error.to_string());
                    let tally = self.store(quorum, &owner, record).await;
                    if !tally.reached() {
                        tracing::warn!(key, ?tally, "failure of the operation not cached on a majority");
                    }
                } else {
                    let tally = self.release(quorum, &owner.keys, &owner.marker, owner.ttl).await;
                    if tally.ok + tally.refused < tally.nodes {
                        tracing::warn!(key, ?tally, "marker of a failed operation not deleted everywhere");
                    }
                }
                Err(IdempotencyError::OperationFailed(error))
            }
        }
    }

    /// [`Idempotency::run`] for operations whose result is text.
    ///
    /// # Errors
    ///
    /// As for [`Idempotency::run`], and [`Error::Config`] when the result
    /// stored under `key` is not UTF-8 (it was stored by
    /// [`Idempotency::run`] with other bytes).
    ///
    /// # Cancel safety
    ///
    /// As for [`Idempotency::run`].
    pub async fn run_string<F, Fut, E>(
        &self,
        key: &str,
        ttl: Duration,
        op: F,
    ) -> Result<String, IdempotencyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<String, E>>,
        E: Into<Box<dyn StdError + Send + Sync>>,
    {
        let bytes = self.run(key, ttl, op).await?;
        String::from_utf8(bytes).map_err(|_| {
            IdempotencyError::from(Error::config(
                Setting::IdempotencyKey,
                format!("the result stored under {key:?} is not UTF-8 text"),
            ))
        })
    }

    /// Validates the input; returns the ttl in whole milliseconds.
    fn check(&self, quorum: &Quorum, key: &str, ttl: Duration) -> Result<Duration> {
        if key.is_empty() {
            return Err(Error::config(Setting::IdempotencyKey, "empty idempotency key"));
        }
        if quorum.tasks.is_closed() {
            return Err(Error::Closed);
        }
        if self.result_ttl < Duration::from_millis(1) || self.result_ttl > MAX_TTL {
            return Err(Error::config(
                Setting::ResultTtl,
                format!(
                    "result ttl must be at least 1 ms and at most {MAX_TTL:?}, got {:?}",
                    self.result_ttl
                ),
            ));
        }
        if keys::is_reserved(key) {
            return Err(Error::config(
                Setting::IdempotencyKey,
                format!(
                    "idempotency key {key:?} is in quorumlock's reserved namespace {:?}",
                    keys::RESERVED_PREFIX
                ),
            ));
        }
        quorum.check_ttl(ttl, self.redlock.options.min_validity)
    }
}
