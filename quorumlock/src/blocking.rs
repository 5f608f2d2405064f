//! The lock for synchronous callers (feature `blocking`): [`Redlock`] and
//! [`Guard`] mirror the async ones and run them on an internal runtime.
//!
//! # Why a multi-thread runtime with one worker
//!
//! A held lock is kept alive by the client's watchdog, a background task.
//! That task must run while the caller's thread is busy in its critical
//! section, which is exactly when the caller is *not* inside any
//! `block_on`. Each client therefore owns a Tokio multi-thread runtime with
//! a single worker thread: a call such as [`Redlock::lock`] drives its future
//! on the caller's thread with `block_on`, while everything spawned (the
//! watchdog, the connections' I/O tasks, the background releases) runs on
//! the worker thread, also between calls. A `current_thread` runtime would
//! make progress only inside `block_on`: renewals would stall while the
//! caller works and its locks would run out. One worker is enough: the
//! background work is a few round trips per renewal period.
//!
//! # Not from async code
//!
//! Blocking a thread of a Tokio runtime stalls every task scheduled on it,
//! and Tokio forbids starting a `block_on` there. Every blocking call checks
//! for a current runtime first and returns [`Error::Config`] instead of
//! panicking; this includes threads of `spawn_blocking`, where Tokio cannot
//! tell us apart from async code. In async code use [`crate::Redlock`]: it
//! takes the same locks (same keys, same tokens format), so both kinds of
//! clients exclude each other.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::builder::RedlockBuilder;
use crate::client as lock;
use crate::config::DEFAULT_SHUTDOWN_TIMEOUT;
use crate::error::{Error, Result, Setting};
use crate::lock::guard::{self, ReleaseReport};
use crate::lock::resources::Resources;
use crate::options::LockOptions;
use crate::shutdown::ShutdownReport;

/// The runtime of a blocking client. When the last client or guard using it
/// is dropped, it shuts the client down (releasing every lock still held and
/// waiting for the background work, at most [`DEFAULT_SHUTDOWN_TIMEOUT`])
/// before it stops, so that a program that drops its client and exits leaves
/// nothing behind.
struct Runtime {
    /// Always `Some` until drop.
    runtime: Option<tokio::runtime::Runtime>,
    client: lock::Redlock,
}

impl Runtime {
    fn new(client: lock::Redlock) -> Result<Self> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("quorumlock-blocking")
            .enable_all()
            .build()
            .map(|runtime| Runtime {
                runtime: Some(runtime),
                client,
            })
            .map_err(|e| {
                Error::config(
                    Setting::Runtime,
                    format!("cannot start the blocking client's runtime: {e}"),
                )
            })
    }

    fn get(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    /// Runs `future` to completion on the calling thread.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::config(
                Setting::Runtime,
                "quorumlock::blocking called from inside a Tokio runtime (async code or spawn_blocking); \
                 use the async quorumlock::Redlock there",
            ));
        }
        Ok(self.get().block_on(future))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        let client = self.client.clone();
        let stop = move || {
            let report = runtime.block_on(client.shutdown(DEFAULT_SHUTDOWN_TIMEOUT));
            if !report.is_complete() {
                tracing::warn!(%report, "blocking client dropped before its work finished");
            }
            // Only the connections' I/O tasks are left.
            runtime.shutdown_background();
        };
        if tokio::runtime::Handle::try_current().is_err() {
            stop();
        } else {
            // Inside async code, where blocking is not allowed (and
            // dropping a runtime the ordinary way panics): on a thread of
            // its own, so that the releases are still sent.
            let spawned = std::thread::Builder::new()
                .name("quorumlock-blocking-shutdown".into())
                .spawn(stop);
            if let Err(error) = spawned {
                tracing::warn!(%error, "cannot shut the blocking client down; its locks expire with their ttl");
            }
        }
    }
}

impl RedlockBuilder {
    /// Checks the settings and creates a [blocking client](Redlock) with its
    /// own runtime (one worker thread). Does not connect.
    ///
    /// # Errors
    ///
    /// As [`RedlockBuilder::build`]; [`Error::Config`] also when the runtime
    /// cannot be started.
    pub fn build_blocking(self) -> Result<Redlock> {
        let inner = self.build()?;
        Ok(Redlock {
            runtime: Arc::new(Runtime::new(inner.clone())?),
            inner,
        })
    }
}

/// A distributed lock client for synchronous code: the blocking form of
/// [`crate::Redlock`], with the same settings, locks and errors.
///
/// Cheap to clone; clones share connections, watchdog and runtime. Call it
/// from ordinary threads, never from async code (see the [module
/// docs](self)).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::blocking::Redlock;
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// let redlock = Redlock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .build_blocking()?;
/// let chunks = redlock.with_lock("doc:1001", Duration::from_secs(30), |guard| {
///     // The watchdog renews the lock while this thread works.
///     let mut chunks = 0;
///     while guard.is_held() && chunks < 500 {
///         chunks += 1; // process one chunk of the document
///     }
///     chunks
/// })?;
/// println!("{chunks} chunks processed");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: lock::Redlock,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Redlock").field(&self.inner).finish()
    }
}

impl Redlock {
    /// Starts configuring a client: the same builder as the async client's;
    /// finish it with [`RedlockBuilder::build_blocking`].
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    /// Number of configured nodes.
    pub fn nodes(&self) -> usize {
        self.inner.nodes()
    }

    /// Nodes that must agree for a lock to be held: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// The lock settings this client uses.
    pub fn options(&self) -> LockOptions {
        self.inner.options()
    }

    /// A client on the same nodes, connections, watchdog and runtime, with
    /// other lock settings. See [`crate::Redlock::with_options`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for invalid options.
    pub fn with_options(&self, options: LockOptions) -> Result<Redlock> {
        Ok(Redlock {
            inner: self.inner.with_options(options)?,
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// One attempt to take the lock; `Ok(None)` when another owner holds it.
    /// See [`crate::Redlock::try_lock`].
    ///
    /// # Errors
    ///
    /// As [`crate::Redlock::try_lock`], and [`Error::Config`] when called
    /// from inside a Tokio runtime.
    pub fn try_lock(&self, resources: impl Into<Resources>, ttl: Duration) -> Result<Option<Guard>> {
        let found = self.runtime.block_on(self.inner.try_lock(resources, ttl))??;
        Ok(found.map(|guard| self.wrap(guard)))
    }

    /// Takes the lock, retrying until the client's wait runs out.
    /// See [`crate::Redlock::lock`].
    ///
    /// # Errors
    ///
    /// As [`crate::Redlock::lock`], and [`Error::Config`] when called from
    /// inside a Tokio runtime.
    pub fn lock(&self, resources: impl Into<Resources>, ttl: Duration) -> Result<Guard> {
        let guard = self.runtime.block_on(self.inner.lock(resources, ttl))??;
        Ok(self.wrap(guard))
    }

    /// Takes the lock (waiting as [`Redlock::lock`] does), runs `work` on
    /// this thread while the watchdog keeps the lock alive, and releases it.
    ///
    /// `work` is called only while the lock has more validity left than its
    /// first renewal needs ([`crate::Guard::start_deadline`]).
    /// A synchronous closure cannot be stopped from outside: if the lock is
    /// lost while `work` runs, `work` still runs to its end. Check
    /// [`Guard::is_held`] between its steps and stop when it turns `false`.
    /// When the lock was lost by the time `work` returns, its value is
    /// dropped and the call returns [`Error::Lost`], so that the caller
    /// knows the work may have overlapped with another holder.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`], plus [`Error::Lost`], and
    /// [`Error::ValidityUsedUp`] when `work` was not called because less than
    /// the start margin was left. A release that fails after `work`
    /// completed is logged, not returned.
    pub fn with_lock<F, T>(&self, resources: impl Into<Resources>, ttl: Duration, work: F) -> Result<T>
    where
        F: FnOnce(&Guard) -> T,
    {
        let guard = self.lock(resources, ttl)?;
        // As the async form: never start on a lock whose validity ran out.
        guard.inner().check_start()?;
        let value = work(&guard);
        if guard.is_held() {
            if let Err(error) = guard.release() {
                tracing::warn!(%error, "release after with_lock failed; the keys expire with their ttl");
            }
            Ok(value)
        } else {
            let inner = guard.inner();
            Err(inner.lost_error(inner.last_confirmed()))
        }
    }

    /// Ends the client and every clone of it: takes no new lock, releases
    /// every lock still held and waits for the background work, at most
    /// `timeout`. See [`crate::Redlock::shutdown`]. Dropping the last clone
    /// and guard does the same, bounded by [`DEFAULT_SHUTDOWN_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside a Tokio runtime.
    pub fn shutdown(&self, timeout: Duration) -> Result<ShutdownReport> {
        self.runtime.block_on(self.inner.shutdown(timeout))
    }

    fn wrap(&self, guard: guard::Guard) -> Guard {
        Guard {
            inner: Some(guard),
            runtime: Arc::clone(&self.runtime),
        }
    }
}

/// A held lock of a [blocking client](Redlock): the blocking form of
/// [`crate::Guard`].
///
/// Renewed by the client's watchdog in the background (unless auto-renewal
/// is off). Dropping it releases the lock like [`Guard::release`], blocking
/// for at most the per-node timeout; unlike the async guard, whose drop
/// never blocks, because a synchronous program may exit right after the
/// drop, and a release left to the background would then be lost (the next
/// run would wait for the ttl).
#[must_use = "dropping the guard releases the lock at once"]
pub struct Guard {
    /// Always `Some` until `release` or drop takes it.
    inner: Option<guard::Guard>,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Guard").field(&self.inner).finish()
    }
}

impl Guard {
    fn inner(&self) -> &guard::Guard {
        self.inner.as_ref().expect("guard present until release or drop")
    }

    /// The locked resource names.
    pub fn resources(&self) -> &[String] {
        self.inner().resources()
    }

    /// The random token stored as the keys' value.
    pub fn token(&self) -> &str {
        self.inner().token()
    }

    /// The fencing token (see [`crate::Guard::fence_token`]): with
    /// [`LockOptions::fenced`](crate::LockOptions::fenced), and always on
    /// etcd and ZooKeeper.
    pub fn fence_token(&self) -> Option<u64> {
        self.inner().fence_token()
    }

    /// The instant until which the lock is guaranteed to be ours (see
    /// [`crate::Guard::valid_until`]), on the standard monotonic clock.
    pub fn valid_until(&self) -> Instant {
        self.inner().valid_until().into_std()
    }

    /// Time left until [`Guard::valid_until`] (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.inner().remaining()
    }

    /// The last instant at which work should start under this lock (see
    /// [`crate::Guard::start_deadline`]), on the standard monotonic clock.
    pub fn start_deadline(&self) -> Instant {
        self.inner().start_deadline().into_std()
    }

    /// Whether the lock is still ours: not lost, and its validity has not
    /// passed. Check it between the steps of a long critical section.
    pub fn is_held(&self) -> bool {
        self.inner().is_held()
    }

    /// Blocks until the lock is lost or `limit` has passed; returns whether
    /// it was lost. For a thread that supervises another one's work.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside a Tokio runtime.
    pub fn wait_lost(&self, limit: Duration) -> Result<bool> {
        let inner = self.inner();
        self.runtime
            .block_on(async { tokio::time::timeout(limit, inner.lost()).await.is_ok() })
    }

    /// Resets the lock's ttl on every node that still holds our token. See
    /// [`crate::Guard::extend`].
    ///
    /// # Errors
    ///
    /// As [`crate::Guard::extend`], and [`Error::Config`] when called from
    /// inside a Tokio runtime.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let inner = self.inner.as_mut().expect("guard present until release or drop");
        self.runtime.block_on(inner.extend(ttl))?
    }

    /// Stops renewal and deletes the lock's keys on every node,
    /// owner-checked. See [`crate::Guard::release`].
    ///
    /// # Errors
    ///
    /// As [`crate::Guard::release`], and [`Error::Config`] when called from
    /// inside a Tokio runtime (the release is then sent in the background).
    pub fn release(mut self) -> Result<ReleaseReport> {
        let inner = self.inner.take().expect("guard present until release or drop");
        match self.runtime.block_on(inner.release()) {
            Ok(report) => report,
            Err(error) => Err(error),
        }
    }
}

impl Drop for Guard {
    /// Releases the lock, blocking for at most the per-node timeout (like
    /// closing a file), so that a guard dropped at the end of a scope or of
    /// `main` has really given the lock back. Inside a Tokio runtime, where
    /// blocking is not allowed, the release is sent in the background instead.
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            if let Err(error) = self.runtime.get().block_on(inner.release()) {
                tracing::debug!(%error, "release on drop failed; the keys expire with their ttl");
            }
        } else {
            // The async guard's drop spawns its release on the current
            // runtime: make it ours, whose worker keeps running.
            let _entered = self.runtime.get().enter();
            drop(inner);
        }
    }
}
