//! The client's background work: every task it starts is tracked here, so
//! that [`Redlock::shutdown`](crate::Redlock::shutdown) can stop new work,
//! wait for what is in flight and say what did not finish.
//!
//! A lock's correctness does not end where its caller stops waiting: the
//! release after a failed attempt, a late reply that must still be driven so
//! that the release queued behind it is sent, the release of a dropped or
//! lost guard, a waiter leaving its queues. Each of these runs after the
//! caller moved on, and a short program (a cron job, a CLI, a test) exits
//! before a task it never waited for has sent a byte. Tracking them is what
//! lets such a program leave no key behind.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What a background task of a client is for: a shutdown reports the
/// kinds still running when its timeout passed
/// ([`ShutdownReport::unfinished`](crate::ShutdownReport::unfinished)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackgroundWork {
    /// Replies still to come after the caller stopped waiting (driven, so
    /// that a release queued behind a request is still sent).
    Replies,
    /// A release: after a failed or cancelled attempt, from a dropped guard,
    /// after a loss.
    Release,
    /// A waiter joining or leaving the hand-off queues.
    Queue,
    /// The watchdog's renewal loop.
    Renewal,
    /// A node's batch of coalesced requests.
    Batch,
    /// A node's pub/sub connection for wake-ups.
    Subscription,
    /// A reading of a node's clock, for its rate.
    ClockReading,
}

impl BackgroundWork {
    const ALL: [BackgroundWork; 7] = [
        BackgroundWork::Replies,
        BackgroundWork::Release,
        BackgroundWork::Queue,
        BackgroundWork::Renewal,
        BackgroundWork::Batch,
        BackgroundWork::Subscription,
        BackgroundWork::ClockReading,
    ];

    /// What the work is, in the words of a shutdown report.
    fn name(self) -> &'static str {
        match self {
            BackgroundWork::Replies => "late replies",
            BackgroundWork::Release => "releases",
            BackgroundWork::Queue => "queue updates",
            BackgroundWork::Renewal => "renewal loop",
            BackgroundWork::Batch => "request batches",
            BackgroundWork::Subscription => "wake-up subscriptions",
            BackgroundWork::ClockReading => "clock readings",
        }
    }
}

impl fmt::Display for BackgroundWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The tracked background tasks of one client and its closing signal.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    tracker: TaskTracker,
    closing: CancellationToken,
    /// Tasks running, by [`BackgroundWork`] (same order as [`BackgroundWork::ALL`]).
    running: [AtomicUsize; BackgroundWork::ALL.len()],
}

/// Counts a task as running until it ends or is dropped (its runtime shut
/// down, also before its first poll).
struct Running {
    tasks: Arc<Tasks>,
    kind: BackgroundWork,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.tasks.counter(self.kind).fetch_sub(1, Ordering::Relaxed);
    }
}

impl Tasks {
    /// Spawns `work` on the current runtime, tracked. Panics outside a
    /// runtime, as `tokio::spawn` does: callers that may run without one
    /// (`Drop`) use [`Tasks::spawn_on`].
    pub(crate) fn spawn<F>(self: &Arc<Self>, kind: BackgroundWork, work: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn_on(&tokio::runtime::Handle::current(), kind, work)
    }

    /// Spawns `work` on `runtime`, tracked.
    pub(crate) fn spawn_on<F>(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        kind: BackgroundWork,
        work: F,
    ) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.counter(kind).fetch_add(1, Ordering::Relaxed);
        let running = Running {
            tasks: Arc::clone(self),
            kind,
        };
        self.tracker.spawn_on(
            async move {
                let _running = running;
                work.await;
            },
            runtime,
        )
    }

    /// Spawns `work` on the current runtime if there is one (from `Drop`,
    /// which must never block); returns whether it was spawned.
    pub(crate) fn spawn_if_running<F>(self: &Arc<Self>, kind: BackgroundWork, work: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.spawn_on(&runtime, kind, work);
                true
            }
            Err(_) => false,
        }
    }

    fn counter(&self, kind: BackgroundWork) -> &AtomicUsize {
        let index = BackgroundWork::ALL
            .iter()
            .position(|&k| k == kind)
            .unwrap_or_default();
        &self.running[index]
    }

    /// Fired once the client shuts down: long-running tasks end, and no new
    /// lock is taken.
    pub(crate) fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Closes the client and waits until every tracked task ended or
    /// `deadline` passed; returns the kinds of work still running then, with
    /// their counts.
    pub(crate) async fn close_and_wait(&self, deadline: Instant) -> Vec<(BackgroundWork, usize)> {
        self.closing.cancel();
        self.tracker.close();
        if tokio::time::timeout_at(deadline, self.tracker.wait())
            .await
            .is_ok()
        {
            // BackgroundWork spawned after this moment (a caller acting on the
            // shutdown) was not part of it.
            return Vec::new();
        }
        BackgroundWork::ALL
            .iter()
            .map(|&kind| (kind, self.counter(kind).load(Ordering::Relaxed)))
            .filter(|&(_, count)| count > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The dead-task detection of the watchdog, the batcher and the
    /// connections relies on this: a runtime that shuts down drops its
    /// tasks, and their handles then report them finished.
    #[test]
    fn a_task_of_a_dropped_runtime_counts_as_finished() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let tasks = Arc::new(Tasks::default());
        let handle = {
            let _entered = runtime.enter();
            tasks.spawn(BackgroundWork::Renewal, std::future::pending())
        };
        assert!(!handle.is_finished());
        drop(runtime);
        assert!(handle.is_finished());
        assert_eq!(tasks.counter(BackgroundWork::Renewal).load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn close_and_wait_names_the_work_still_running() {
        let tasks = Arc::new(Tasks::default());
        tasks.spawn(BackgroundWork::Release, std::future::pending());
        tasks.spawn(BackgroundWork::Replies, async {});
        let closing = tasks.closing().clone();
        tasks.spawn(
            BackgroundWork::Subscription,
            async move { closing.cancelled().await },
        );
        let left = tasks
            .close_and_wait(Instant::now() + Duration::from_secs(1))
            .await;
        assert_eq!(left, [(BackgroundWork::Release, 1)]);
        assert!(tasks.is_closed());
    }
}
