//! Whether a node's request connection still answers: requests waiting,
//! and when it last showed progress (see `Conn::stall_limit`), and each
//! request watched until its reply or the connection's retirement.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Whether a connection still answers: what [`Conn::stall_limit`](super::conn::Conn::stall_limit) is
/// measured on.
pub(super) struct Health {
    /// The base of `progress_us`.
    since: Instant,
    /// Requests handed to the connection that neither got their reply nor
    /// were given up (dropped) by their caller.
    outstanding: AtomicUsize,
    /// When the connection last showed it works, in µs after `since`: its
    /// last reply while other requests were waiting, or when it went from
    /// idle to busy (an idle connection has nothing to answer, and the next
    /// request starts the wait afresh, so the reply that leaves it idle
    /// need not read the clock).
    progress_us: AtomicU64,
    /// Replies received: progress that [`Conn::replace_if_silent`](super::conn::Conn::replace_if_silent) sees even
    /// where `progress_us` was not moved.
    answers: AtomicU64,
    /// Cancelled when the connection is retired: its requests still waiting
    /// fail at once (see [`Conn::replace_if_silent`](super::conn::Conn::replace_if_silent)).
    pub(super) retired: CancellationToken,
    /// A reply showed the connection unusable (see `settle` in `conn`).
    pub(super) broken: AtomicBool,
}

impl Health {
    pub(super) fn new() -> Self {
        Health {
            since: Instant::now(),
            outstanding: AtomicUsize::new(0),
            progress_us: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            retired: CancellationToken::new(),
            broken: AtomicBool::new(false),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// What shows progress: when the wait last started afresh, and how many
    /// replies came.
    pub(super) fn progress(&self) -> (u64, u64) {
        (
            self.progress_us.load(Ordering::Acquire),
            self.answers.load(Ordering::Acquire),
        )
    }

    /// Starts the wait for progress afresh.
    pub(super) fn restart(&self) {
        self.progress_us.store(self.now_us(), Ordering::Release);
    }

    /// Requests are waiting and nothing came back for `limit`.
    pub(super) fn stalled(&self, limit: Duration) -> bool {
        let limit_us = u64::try_from(limit.as_micros()).unwrap_or(u64::MAX);
        self.outstanding.load(Ordering::Acquire) > 0
            && self
                .now_us()
                .saturating_sub(self.progress_us.load(Ordering::Acquire))
                >= limit_us
    }
}

/// One request counted in [`Health::outstanding`] until it is answered or
/// dropped.
pub(super) struct InFlight {
    pub(super) health: Arc<Health>,
    answered: bool,
}

impl InFlight {
    pub(super) fn new(health: Arc<Health>) -> Self {
        if health.outstanding.fetch_add(1, Ordering::AcqRel) == 0 {
            health.restart();
        }
        InFlight {
            health,
            answered: false,
        }
    }

    /// The connection answered this request.
    pub(super) fn answered(&mut self) {
        self.health.answers.fetch_add(1, Ordering::AcqRel);
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Decided on the count this request leaves, atomically with leaving
        // it: either another request still waits and this reply is its
        // progress, or the connection went idle and the next request starts
        // the wait afresh (`InFlight::new`); a request handed over at this
        // moment is covered by one of the two.
        let others = self.health.outstanding.fetch_sub(1, Ordering::AcqRel) - 1;
        if self.answered && others > 0 {
            self.health.restart();
        }
    }
}

pin_project_lite::pin_project! {
    /// A request handed to a connection, until its reply or the
    /// connection's retirement (see [`Conn::replace_if_silent`](super::conn::Conn::replace_if_silent)),
    /// whichever comes first, the reply preferred; counted in
    /// [`Health::outstanding`] until then.
    ///
    /// A future of its own rather than an `async` block selecting between
    /// the two: such a block stores the request twice (as what it captured
    /// and as what it awaits), and every request's reply is allocated and
    /// moved once on every lock's path.
    pub(super) struct Watched<F> {
        #[pin]
        request: F,
        #[pin]
        retired: WaitForCancellationFutureOwned,
        in_flight: InFlight,
    }
}

impl<F> Watched<F> {
    pub(super) fn new(request: F, in_flight: InFlight) -> Self {
        Watched {
            request,
            retired: in_flight.health.retired.clone().cancelled_owned(),
            in_flight,
        }
    }
}

impl<F, R> Future for Watched<F>
where
    F: Future<Output = RedisResult<R>>,
{
    type Output = RedisResult<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.request.poll(cx) {
            this.in_flight.answered();
            return Poll::Ready(result);
        }
        match this.retired.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(retired())),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The error of a request whose connection was retired before it answered
/// (see [`Conn::replace_if_silent`](super::conn::Conn::replace_if_silent)):
/// whether it ran is unknown.
fn retired() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "connection retired",
        "it answered nothing while a new connection to the node did".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection with requests waiting is stalled only once nothing came
    /// back for the limit; a reply while others wait is progress for them.
    #[tokio::test(start_paused = true)]
    async fn a_reply_is_progress_for_the_requests_still_waiting() {
        let limit = Duration::from_secs(1);
        let health = Arc::new(Health::new());
        let mut first = InFlight::new(Arc::clone(&health));
        let second = InFlight::new(Arc::clone(&health));
        tokio::time::advance(limit).await;
        assert!(health.stalled(limit), "two waiting, nothing back");
        let before = health.progress();
        first.answered();
        drop(first);
        assert_ne!(health.progress(), before);
        assert!(!health.stalled(limit), "the reply restarted the second's wait");
        tokio::time::advance(limit).await;
        assert!(health.stalled(limit));
        drop(second);
        assert!(!health.stalled(limit), "an idle connection has nothing to answer");
        let _next = InFlight::new(Arc::clone(&health));
        assert!(
            !health.stalled(limit),
            "a request to an idle connection starts afresh"
        );
    }

    /// A reply that leaves the connection idle still counts (see
    /// `Conn::replace_if_silent`), though it does not read the clock.
    #[tokio::test(start_paused = true)]
    async fn a_reply_that_leaves_the_connection_idle_still_counts_as_progress() {
        let health = Arc::new(Health::new());
        let mut only = InFlight::new(Arc::clone(&health));
        tokio::time::advance(Duration::from_secs(1)).await;
        let before = health.progress();
        only.answered();
        drop(only);
        assert_ne!(health.progress(), before);
    }
}
