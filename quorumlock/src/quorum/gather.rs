//! The fan-out itself: every node's request started at once, in node order,
//! replies counted as they arrive, and the requests still pending when the
//! caller stops waiting driven to the end in the background.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{FuturesUnordered, StreamExt};
use redis::RedisResult;
use tokio::time::Instant;

use super::tally::{Tally, Until};
use crate::error::NodeErrorKind;
use crate::node::{Acked, Node};
use crate::tasks::{Tasks, Work};

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
    let mut tally = Tally::new(nodes.len());
    gather(nodes, tasks, deadline, finish_by, op, |i, outcome| {
        match outcome.and_then(Answer::answer) {
            Ok(true) => tally.ok += 1,
            Ok(false) => tally.refuse(i),
            Err(kind) => tally.fail(&nodes[i], kind),
        }
        let done = tally.done(until);
        if done {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .await;
    tally
}
