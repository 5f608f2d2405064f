//! The fan-out itself: every node's request started at once, in node order,
//! replies counted as they arrive, and the requests still pending when the
//! caller stops waiting driven to the end in the background.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::RedisResult;
use tokio::time::Instant;

use super::tally::{Tally, Until};
use crate::backend::redlock::node::{Acked, Node};
use crate::error::NodeErrorKind;
use crate::metrics;
use crate::tasks::{BackgroundWork, Tasks};

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
/// until `finish_by`. Dropping them would not be neutral: the redis client
/// skips a request whose caller went away before it was written (e.g. while
/// the connection was still being set up), so a lock would be set on a bare
/// majority instead of on every node that could take it, and a release meant
/// to follow a late SET on a slow node might never be sent. After an early
/// stop, their failures, and their silence until `finish_by`, are still
/// counted in the node-error metrics: a node that is down or black-holed
/// fails every request, and a majority that answers first would otherwise
/// hide it from the metrics for good.
pub(crate) async fn gather<T, F, Fut>(
    nodes: &Arc<[Node]>,
    tasks: &Arc<Tasks>,
    deadline: Instant,
    finish_by: Instant,
    mut op: F,
    mut on_reply: impl FnMut(usize, Result<T, NodeErrorKind>) -> ControlFlow<()>,
) where
    T: Send + 'static,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
{
    if nodes.len() == 1 {
        // Boxed here, not inside: an argument is kept in the callee's
        // future as it is, and would make every fan-out's future larger.
        return gather_one(tasks, deadline, finish_by, Box::pin(op(0)), on_reply).await;
    }
    let started = Instant::now();
    let (mut pending, first) = start((0..nodes.len()).map(|i| indexed(i, op(i))));
    let mut answered = vec![false; nodes.len()];
    let mut stopped = false;
    let mut first = first.into_iter();
    for (i, outcome) in first.by_ref() {
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
                for (i, answered) in answered.iter_mut().enumerate() {
                    if std::mem::replace(answered, true) {
                        continue;
                    }
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
    if first.len() > 0 || !pending.is_empty() {
        let mut unreported = Unreported {
            nodes: Arc::clone(nodes),
            answered,
            since: started,
        };
        for (i, outcome) in first {
            unreported.reply(i, outcome);
        }
        drive_leftovers(
            tasks,
            BackgroundWork::Replies,
            pending,
            finish_by,
            Some(unreported),
        );
    }
}

/// [`gather`] for a client of one node: the same steps (the request handed
/// over by its first poll, its outcome reported until `deadline`, then
/// driven in the background until `finish_by`) without the set a fan-out
/// keeps its requests in.
async fn gather_one<T, Fut>(
    tasks: &Arc<Tasks>,
    deadline: Instant,
    finish_by: Instant,
    // Boxed so that it can move to the background if the deadline passes.
    mut request: Pin<Box<Fut>>,
    mut on_reply: impl FnMut(usize, Result<T, NodeErrorKind>) -> ControlFlow<()>,
) where
    T: Send + 'static,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
{
    let started = Instant::now();
    let outcome = match futures::poll!(request.as_mut()) {
        Poll::Ready(outcome) => Ok(outcome),
        Poll::Pending => tokio::time::timeout_at(deadline, request.as_mut()).await,
    };
    match outcome {
        Ok(outcome) => {
            let _ = on_reply(0, outcome.map_err(NodeErrorKind::Redis));
        }
        Err(_) => {
            let budget = deadline.saturating_duration_since(started);
            let _ = on_reply(0, Err(NodeErrorKind::Timeout(budget)));
            // Reported as timed out: nothing more to count.
            let pending: FuturesUnordered<_> = std::iter::once(indexed(0, request)).collect();
            drive_leftovers(tasks, BackgroundWork::Replies, pending, finish_by, None);
        }
    }
}

/// Hands `op(i)` to every node `i` and returns without waiting for the
/// replies, which are awaited in the background until `finish_by`. For
/// requests whose outcome changes nothing for the caller (the hand-off
/// queue's bookkeeping), but which must keep their place in each node's
/// order: each is handed over before this returns, as in [`gather`].
pub(crate) async fn hand_over<T, F, Fut>(nodes: usize, tasks: &Arc<Tasks>, finish_by: Instant, mut op: F)
where
    T: Send + 'static,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
{
    let (pending, _) = start((0..nodes).map(|i| indexed(i, op(i))));
    drive_leftovers(tasks, BackgroundWork::Queue, pending, finish_by, None);
}

/// `request` to `node`, its outcome tagged with the node's index. Held in
/// the fan-out set's own allocation, which pins it: no box of its own.
fn indexed<Fut: Future>(node: usize, request: Fut) -> impl Future<Output = (usize, Fut::Output)> {
    request.map(move |outcome| (node, outcome))
}

/// Puts the requests of a fan-out (`op(i)` for every node `i`, in node
/// order) into one set and gives each its first poll, in node order, before
/// any reply is counted: the first poll is what hands a request over to its
/// node's connection (see `Node`), and a request never polled before the
/// caller stops early would lose its place to a later request of ours, such
/// as the release meant to undo it. Returns the set of pending requests and
/// the outcomes that were there at once.
///
/// The first polls go through the set itself, which polls newly added
/// futures in the order they were added and keeps polling until each has
/// had its turn, also past one that completes at once. They are made with a
/// waker that does nothing: each request registers the set's own waker for
/// itself, and the caller's waker is registered by the next poll of the set
/// (the caller's `next()`), before it looks for replies, so no reply is
/// missed. The set wakes its caller whenever one poll has polled every
/// future it holds (so that a busy set cannot starve other tasks), which
/// after a first round of polls would wake the caller for nothing: an extra
/// poll of the whole operation and, on a Tokio runtime, a needless look at
/// the I/O driver, a system call per fan-out.
fn start<G: Future>(requests: impl Iterator<Item = G>) -> (FuturesUnordered<G>, Vec<G::Output>) {
    let mut pending: FuturesUnordered<G> = requests.collect();
    let mut first = Vec::new();
    let mut context = Context::from_waker(Waker::noop());
    while let Poll::Ready(Some(outcome)) = pending.poll_next_unpin(&mut context) {
        first.push(outcome);
    }
    (pending, first)
}

/// Drives requests still pending when their caller stopped waiting, until
/// `finish_by` (see [`gather`]), as tracked work of kind `kind`, and counts
/// the failures of those in `unreported`. One timer bounds them all, not one
/// per request: this is on every lock's path.
fn drive_leftovers<T, Fut>(
    tasks: &Arc<Tasks>,
    kind: BackgroundWork,
    mut pending: FuturesUnordered<Fut>,
    finish_by: Instant,
    mut unreported: Option<Unreported>,
) where
    T: Send + 'static,
    Fut: Future<Output = (usize, RedisResult<T>)> + Send + 'static,
{
    if pending.is_empty() {
        return;
    }
    tasks.spawn(kind, async move {
        let replies = async {
            while let Some((i, outcome)) = pending.next().await {
                if let Some(unreported) = &mut unreported {
                    unreported.reply(i, outcome);
                }
            }
        };
        if tokio::time::timeout_at(finish_by, replies).await.is_err()
            && let Some(unreported) = unreported
        {
            unreported.time_out(finish_by);
        }
    });
}

/// The requests of a fan-out whose caller stopped waiting before they
/// answered: what becomes of them is counted in the node-error metrics
/// only (the caller's [`Tally`] is settled).
struct Unreported {
    nodes: Arc<[Node]>,
    /// Node `i`'s outcome has been reported to the caller or counted here
    /// (so a request the caller was told timed out is not counted again
    /// when it fails later).
    answered: Vec<bool>,
    /// When the requests were sent.
    since: Instant,
}

impl Unreported {
    fn reply<T>(&mut self, i: usize, outcome: RedisResult<T>) {
        if std::mem::replace(&mut self.answered[i], true) {
            return;
        }
        if let Err(error) = outcome {
            self.fail(i, &NodeErrorKind::Redis(error));
        }
    }

    /// The requests still unanswered at `at`, given up on.
    fn time_out(self, at: Instant) {
        let budget = at.saturating_duration_since(self.since);
        for i in (0..self.nodes.len()).filter(|&i| !self.answered[i]) {
            self.fail(i, &NodeErrorKind::Timeout(budget));
        }
    }

    fn fail(&self, i: usize, kind: &NodeErrorKind) {
        let node = self.nodes[i].name();
        tracing::debug!(node, error = ?kind, "node failed after its caller stopped waiting");
        metrics::node_error(node, kind);
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
    nodes: &Arc<[Node]>,
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
            Ok(true) => tally.confirm(i),
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

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::Duration;

    use super::*;

    /// Counts the wake-ups of the task that polls a fan-out.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request that records each poll and never completes.
    struct Recorded {
        node: usize,
        polls: Arc<Mutex<Vec<usize>>>,
    }

    impl Future for Recorded {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.polls.lock().unwrap().push(self.node);
            Poll::Pending
        }
    }

    #[test]
    fn every_request_is_polled_once_in_node_order_and_the_caller_is_not_woken_for_nothing() {
        let polls = Arc::new(Mutex::new(Vec::new()));
        let (mut pending, first) = start((0..5).map(|node| {
            let polls = Arc::clone(&polls);
            indexed(node, Recorded { node, polls })
        }));
        assert!(first.is_empty());
        assert_eq!(*polls.lock().unwrap(), [0, 1, 2, 3, 4]);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        assert!(
            pending
                .poll_next_unpin(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(
            polls.lock().unwrap().len(),
            5,
            "no request polled again without a wake-up"
        );
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            0,
            "the caller was woken with nothing to do"
        );
    }

    /// Nodes that nothing listens on: `gather` needs them only for names.
    fn nodes(n: usize) -> Arc<[Node]> {
        let settings = crate::backend::redlock::node::Settings {
            connect_timeout: Duration::from_secs(1),
            tasks: Arc::default(),
            batching: false,
            replica_ack: None,
            #[cfg(feature = "sim")]
            dialer: None,
        };
        (0..n)
            .map(|_| Node::open("redis://127.0.0.1:1/", &settings).expect("a valid URL"))
            .collect()
    }

    /// With one node (its own path) as with several: a reply that comes
    /// after the deadline is reported as a timeout, and its request is
    /// still driven to its end, in the background (see `gather`).
    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_deadline_times_out_and_still_runs_to_its_end() {
        const LATE: Duration = Duration::from_millis(200);
        for n in [1, 3] {
            let (nodes, tasks) = (nodes(n), Arc::new(Tasks::default()));
            let ended = Arc::new(AtomicUsize::new(0));
            let start = Instant::now();
            let (deadline, finish_by) = (start + LATE / 2, start + LATE * 2);
            let mut reported = Vec::new();
            gather(
                &nodes,
                &tasks,
                deadline,
                finish_by,
                |i| {
                    let ended = Arc::clone(&ended);
                    async move {
                        tokio::time::sleep(LATE).await;
                        ended.fetch_add(1, Ordering::Relaxed);
                        Ok(i)
                    }
                },
                |i, outcome| {
                    reported.push((i, matches!(outcome, Err(NodeErrorKind::Timeout(_)))));
                    ControlFlow::Continue(())
                },
            )
            .await;
            assert_eq!(Instant::now(), deadline, "{n} nodes");
            assert_eq!(reported, (0..n).map(|i| (i, true)).collect::<Vec<_>>());
            assert_eq!(ended.load(Ordering::Relaxed), 0);
            tokio::time::sleep_until(start + LATE).await;
            tokio::task::yield_now().await;
            assert_eq!(
                ended.load(Ordering::Relaxed),
                n,
                "{n} nodes: not driven to the end"
            );
        }
    }

    #[test]
    fn requests_after_one_that_completes_at_once_still_get_their_first_poll() {
        let polls = Arc::new(Mutex::new(Vec::new()));
        let (pending, first) = start((0..3).map(|node| {
            let polls = Arc::clone(&polls);
            indexed(node, async move {
                polls.lock().unwrap().push(node);
                if node != 0 {
                    std::future::pending::<()>().await;
                }
                node
            })
        }));
        assert_eq!(first.iter().map(|(node, _)| *node).collect::<Vec<_>>(), [0]);
        assert_eq!(*polls.lock().unwrap(), [0, 1, 2]);
        assert_eq!(pending.len(), 2);
    }
}
