//! [`Redlock::shutdown`]: the end of a client, with nothing left behind.

use std::fmt;
use std::time::Duration;

use crate::client::Redlock;
use crate::duration::deadline_after;
use crate::lock::resources::Resources;
use crate::tasks::BackgroundWork;

/// What [`Redlock::shutdown`] achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a shutdown that did not complete may leave keys until their ttl"]
pub struct ShutdownReport {
    /// Locks still held when the shutdown began, given back by it (deleted,
    /// or kept until their minimum hold passes).
    pub released: usize,
    /// Of those, the locks whose release no majority confirmed in time: they
    /// may keep others out until their ttl runs out.
    pub unconfirmed: Vec<Resources>,
    /// Background work still running when the timeout passed: each kind
    /// with its number of tasks.
    pub unfinished: Vec<(BackgroundWork, usize)>,
}

impl ShutdownReport {
    /// Every release was confirmed and all background work finished: the
    /// client left no key of its own on a majority of nodes.
    pub fn is_complete(&self) -> bool {
        self.unconfirmed.is_empty() && self.unfinished.is_empty()
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "released {} held lock(s)", self.released)?;
        if !self.unconfirmed.is_empty() {
            let names: Vec<&[String]> = self.unconfirmed.iter().map(Resources::names).collect();
            write!(f, "; not confirmed by a majority: {names:?}")?;
        }
        for (i, (what, count)) in self.unfinished.iter().enumerate() {
            let lead = if i == 0 { "; unfinished: " } else { ", " };
            write!(f, "{lead}{count} {what}")?;
        }
        Ok(())
    }
}

impl Redlock {
    /// Ends the client (and every clone of it): takes no new lock, releases
    /// every lock its guards still hold, and waits until its background
    /// work is done or `timeout` has passed.
    ///
    /// Call it before a short program exits (a cron job, a CLI, a serverless
    /// handler, the end of `main`). A lock's work does not end where its
    /// caller stops waiting: the release after a failed attempt, the release
    /// of a dropped guard and a waiter leaving the queues run in the
    /// background, on the caller's runtime, and a runtime that shuts down
    /// drops them unsent. Without this call:
    /// - a guard dropped at the end of `#[tokio::main]` releases nothing (its
    ///   release is spawned on a runtime that is about to stop);
    /// - a failed `try_lock` may leave our keys on the nodes that granted it,
    ///   for the whole ttl.
    ///
    /// Both only delay others (the keys expire with their ttl); neither can
    /// give two holders. Long-lived services need not call it, though it is
    /// the clean way to stop one.
    ///
    /// A lock taken with [`LockOptions::min_hold`] whose minimum hold has not
    /// passed is given back as [`Guard::release`] gives it back: its keys
    /// are set, owner-checked, to expire when the minimum hold passes, so
    /// the job cannot run again before then.
    ///
    /// Guards still alive report the lock lost ([`Guard::lost`] completes,
    /// `with_lock` stops its work with [`Error::Closed`]); their
    /// [`Guard::release`] returns [`Error::Closed`]. Calls after it return
    /// [`Error::Closed`]; a second shutdown waits for what is left.
    ///
    /// [`Guard::lost`]: crate::Guard::lost
    /// [`Guard::release`]: crate::Guard::release
    /// [`Error::Closed`]: crate::Error::Closed
    /// [`LockOptions::min_hold`]: crate::LockOptions::min_hold
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::{DEFAULT_SHUTDOWN_TIMEOUT, Redlock};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
    /// if let Some(_guard) = redlock.try_lock("report:daily", Duration::from_secs(60)).await? {
    ///     // build the report
    /// }
    /// // The guard is dropped: its release is in the background. Wait for it.
    /// let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
    /// if !report.is_complete() {
    ///     eprintln!("shutdown: {report}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        let deadline = deadline_after(timeout);
        let (outcomes, unfinished) = self.backend.shutdown(deadline).await;
        let released = outcomes.len();
        let unconfirmed = outcomes
            .into_iter()
            .filter(|(_, confirmed)| !confirmed)
            .map(|(resources, _)| resources)
            .collect();
        let report = ShutdownReport {
            released,
            unconfirmed,
            unfinished,
        };
        tracing::debug!(%report, "client shut down");
        report
    }
}
