//! Concurrent fan-out to all nodes, majority counting, early exit and the
//! validity arithmetic. Acquire, extend, release and the watchdog's renewals
//! all go through [`gather`], so deadlines and the quorum rules live in one
//! place.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::RedisResult;
use tokio::time::Instant;

use crate::error::{Error, NodeError, NodeErrorKind};
use crate::node::Node;
use crate::replica::Acked;
use crate::tasks::{Tasks, Work};

/// Majority of all configured nodes: `n / 2 + 1`.
///
/// Counted over every configured node, not over the ones that answered:
/// two majorities of the same `n` always share a node, which is what keeps
/// two owners from both holding a lock.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// When [`fan_out`] may stop waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Until {
    /// As soon as the outcome is certain: a majority succeeded, or so many
    /// refused or failed that a majority can no longer be reached. The
    /// requests still in flight are not cancelled on the server.
    Decided,
    /// A majority answered, whatever the answer, or so many failed that a
    /// majority can no longer answer. For release, where "deleted" and
    /// "already gone" both confirm that the node holds nothing of ours: the
    /// lock is free for others once a majority confirmed, and waiting for the
    /// slowest (or a dead) node would only add its latency (up to the node
    /// timeout) to every release. The remaining requests still run, in the
    /// background (see [`gather`]).
    Answered,
    /// Every node answered or timed out.
    All,
}

/// The per-node outcomes of one fan-out.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Nodes that confirmed the operation.
    pub(crate) ok: usize,
    /// Nodes that answered "no" (the key is someone else's, or gone).
    pub(crate) refused: usize,
    /// Which nodes those were (by index).
    pub(crate) refused_by: Vec<usize>,
    /// Nodes that failed or timed out.
    pub(crate) errors: Vec<NodeError>,
    /// Nodes configured.
    pub(crate) nodes: usize,
}

impl Tally {
    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes)
    }

    pub(crate) fn reached(&self) -> bool {
        self.ok >= self.quorum()
    }

    /// Refusals alone rule out a majority: the resource belongs to someone
    /// else (acquire) or is no longer ours (extend), whatever the failing
    /// nodes would have said.
    pub(crate) fn refused_by_majority(&self) -> bool {
        self.refused > self.nodes - self.quorum()
    }

    /// Failures alone rule out a majority: an outage, whatever the other
    /// nodes said. A failed acquisition that is not one is busy (see
    /// [`Error::Held`]).
    pub(crate) fn failures_rule_out_majority(&self) -> bool {
        self.errors.len() > self.nodes - self.quorum()
    }

    fn decided(&self) -> bool {
        self.reached() || self.refused + self.errors.len() > self.nodes - self.quorum()
    }

    fn answered(&self) -> bool {
        self.ok + self.refused >= self.quorum() || self.errors.len() > self.nodes - self.quorum()
    }

    pub(crate) fn fail(&mut self, node: &Node, kind: NodeErrorKind) {
        tracing::debug!(node = node.name(), error = ?kind, "node failed");
        self.errors.push(NodeError {
            node: node.name().to_owned(),
            kind,
        });
    }

    /// The error for a fan-out that did not reach a majority because nodes
    /// failed.
    pub(crate) fn unreachable(self) -> Error {
        Error::Unreachable {
            succeeded: self.ok,
            refused: self.refused,
            quorum: self.quorum(),
            nodes: self.nodes,
            errors: self.errors,
        }
    }
}

/// Sends `op(i)` to every node `i` at once and feeds each node's outcome to
/// `on_reply` as it arrives, until `on_reply` says stop or every node has
/// answered.
///
/// Each node has until `deadline` to answer; every node that has not
/// answered by then is reported once as a [`NodeErrorKind::Timeout`]. The
/// caller derives the deadline from the per-node timeout (and, where a lock
/// is held, its validity), so one hung node can never hold the caller past it.
///
/// Requests still pending when this returns (stopped early, or deadline) are
/// not dropped but handed to a background task of `tasks` that drives them
/// until `finish_by`. Dropping them would not be neutral: the redis client skips a
/// request whose caller went away before it was written (e.g. while the
/// connection was still being set up), so a lock would be set on a bare
/// majority instead of on every node that could take it, and a release meant
/// to follow a late SET on a slow node might never be sent.
pub(crate) async fn gather<T, F, Fut>(
    nodes: &[Node],
    tasks: &Arc<Tasks>,
    deadline: Instant,
    finish_by: Instant,
    op: F,
    mut on_reply: impl FnMut(usize, Result<T, NodeErrorKind>) -> ControlFlow<()>,
) where
    T: Send + 'static,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
{
    let started = Instant::now();
    let (mut pending, first) = start_all(nodes.len(), op).await;
    let mut answered = vec![false; nodes.len()];
    let mut stopped = false;
    for (i, outcome) in first {
        answered[i] = true;
        if on_reply(i, outcome.map_err(NodeErrorKind::Redis)).is_break() {
            stopped = true;
            break;
        }
    }
    let timer = tokio::time::sleep_until(deadline);
    tokio::pin!(timer);
    while !stopped {
        let (i, outcome) = tokio::select! {
            biased;
            next = pending.next() => match next {
                Some(reply) => reply,
                None => break,
            },
            () = &mut timer => {
                let budget = deadline.saturating_duration_since(started);
                for i in (0..nodes.len()).filter(|&i| !answered[i]) {
                    if on_reply(i, Err(NodeErrorKind::Timeout(budget))).is_break() {
                        break;
                    }
                }
                break;
            }
        };
        answered[i] = true;
        stopped = on_reply(i, outcome.map_err(NodeErrorKind::Redis)).is_break();
    }
    drive_leftovers(tasks, Work::Replies, pending, finish_by);
}

/// Hands `op(i)` to every node `i` and returns without waiting for the
/// replies, which are awaited in the background until `finish_by`. For
/// requests whose outcome changes nothing for the caller (the hand-off
/// queue's bookkeeping), but which must keep their place in each node's
/// order: each is handed over before this returns, as in [`gather`].
pub(crate) async fn send_all<T, F, Fut>(nodes: usize, tasks: &Arc<Tasks>, finish_by: Instant, op: F)
where
    T: Send + 'static,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
{
    let (pending, _) = start_all(nodes, op).await;
    drive_leftovers(tasks, Work::Queue, pending, finish_by);
}

/// A request and the index of its node.
struct Indexed<F> {
    node: usize,
    request: Pin<Box<F>>,
}

impl<F: Future> Future for Indexed<F> {
    type Output = (usize, F::Output);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let node = self.node;
        self.request.as_mut().poll(cx).map(|outcome| (node, outcome))
    }
}

/// Creates `op(i)` for every node and gives each its first poll, in node
/// order, before any reply is counted: the first poll is what hands a
/// request over to its node's connection (see `Node`), and a request never
/// polled before the caller stops early would lose its place to a later
/// request of ours, such as the release meant to undo it. (A
/// `FuturesUnordered` alone stops polling the rest as soon as one request
/// completes.) Returns the pending requests (boxed, so that only a pointer
/// moves) and the outcomes that were there at once.
async fn start_all<F, Fut>(
    nodes: usize,
    mut op: F,
) -> (FuturesUnordered<Indexed<Fut>>, Vec<(usize, Fut::Output)>)
where
    F: FnMut(usize) -> Fut,
    Fut: Future,
{
    let pending = FuturesUnordered::new();
    let mut first = Vec::new();
    for node in 0..nodes {
        let mut request = Box::pin(op(node));
        match futures::poll!(request.as_mut()) {
            Poll::Ready(outcome) => first.push((node, outcome)),
            Poll::Pending => pending.push(Indexed { node, request }),
        }
    }
    (pending, first)
}

/// Drives requests still pending when their caller stopped waiting, until
/// `finish_by` (see [`gather`]), as tracked work of kind `kind`. One timer
/// bounds them all, not one per request: this is on every lock's path.
fn drive_leftovers<Fut>(
    tasks: &Arc<Tasks>,
    kind: Work,
    pending: FuturesUnordered<Indexed<Fut>>,
    finish_by: Instant,
) where
    Fut: Future + Send + 'static,
    Fut::Output: Send,
{
    if !pending.is_empty() {
        tasks.spawn(kind, async move {
            let _ = tokio::time::timeout_at(finish_by, pending.for_each(|_| async {})).await;
        });
    }
}

/// A node's reply to a yes/no operation, as [`fan_out`] counts it.
pub(crate) trait Answer: Send + 'static {
    /// Yes, no, or the node counts as failed although it replied.
    fn answer(self) -> Result<bool, NodeErrorKind>;
}

impl Answer for bool {
    fn answer(self) -> Result<bool, NodeErrorKind> {
        Ok(self)
    }
}

/// Replica-acknowledged mode: a yes the replicas did not acknowledge.
impl Answer for Acked<bool> {
    fn answer(self) -> Result<bool, NodeErrorKind> {
        self
    }
}

/// [`gather`] for yes/no operations (acquire, extend, release), counted into
/// a [`Tally`], until the point `until` names.
pub(crate) async fn fan_out<A, F, Fut>(
    nodes: &[Node],
    tasks: &Arc<Tasks>,
    deadline: Instant,
    finish_by: Instant,
    until: Until,
    op: F,
) -> Tally
where
    A: Answer,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<A>> + Send + 'static,
{
    let mut tally = Tally {
        nodes: nodes.len(),
        ..Tally::default()
    };
    gather(nodes, tasks, deadline, finish_by, op, |i, outcome| {
        match outcome.and_then(Answer::answer) {
            Ok(true) => tally.ok += 1,
            Ok(false) => {
                tally.refused += 1;
                tally.refused_by.push(i);
            }
            Err(kind) => tally.fail(&nodes[i], kind),
        }
        let done = match until {
            Until::Decided => tally.decided(),
            Until::Answered => tally.answered(),
            Until::All => false,
        };
        if done {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .await;
    tally
}

/// The instant `after` from now, or one so far ahead that it never comes
/// (for a wait or a timeout of `Duration::MAX`, "no limit"): an `Instant`
/// cannot hold every `Duration`, and adding one that does not fit panics.
pub(crate) fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after).unwrap_or(now + FAR_FUTURE)
}

/// What "never" is for [`deadline_after`]: a century, far beyond any
/// process's life, and small enough for every clock's `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The clock drift allowance for a ttl: `ttl * factor + fixed`.
///
/// Nodes expire keys by their own clocks, which may run faster than ours;
/// the reference Redlock implementation allows 1 % of the ttl plus 2 ms for
/// the granularity of Redis expiry. See [`crate::DEFAULT_DRIFT_FACTOR`].
pub(crate) fn drift(ttl: Duration, factor: f64, fixed: Duration) -> Duration {
    ttl.mul_f64(factor).saturating_add(fixed)
}

/// `ttl - elapsed - drift`, or `None` when nothing is left.
///
/// `elapsed` is measured on the monotonic clock from before the first request
/// was sent, so it covers the slowest node we counted and all scheduling.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority_of_all_nodes() {
        assert_eq!((1..=7).map(quorum).collect::<Vec<_>>(), vec![1, 2, 2, 3, 3, 4, 4]);
        for n in 1..=50 {
            // Two quorums always intersect.
            assert!(2 * quorum(n) > n);
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms_by_default() {
        let d = drift(
            Duration::from_secs(30),
            crate::DEFAULT_DRIFT_FACTOR,
            crate::DEFAULT_DRIFT_FIXED,
        );
        assert_eq!(d, Duration::from_millis(302));
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift_and_never_goes_negative() {
        let ms = Duration::from_millis;
        assert_eq!(validity(ms(1000), ms(100), ms(12)), Some(ms(888)));
        assert_eq!(validity(ms(1000), ms(988), ms(12)), None);
        assert_eq!(validity(ms(1000), ms(2000), ms(12)), None);
    }
}
