//! Coalescing of concurrent acquires and releases into one pipeline per
//! node.
//!
//! Under load, a lock's cost is dominated by per-request overhead in the
//! client (a hand-over, a write and a wake-up each) and by the per-call cost
//! of the release script in the servers, not by the work of `SET NX`. So
//! each node batches adaptively, with no timer and no delay for a lone
//! caller:
//! - a request that finds the node lightly used (fewer than
//!   [`DIRECT_LIMIT`] requests sent directly in flight, nothing queued, no
//!   batch in flight) is sent at once, as its usual single command, by the
//!   caller itself;
//! - requests that arrive while the node is busier queue up, and a
//!   background task sends them as batches, each one pipeline (its releases
//!   in one script call, its acquires as `SET NX PX` each: see
//!   [`wire::batch`](crate::backend::redlock::wire::batch); at most [`BATCH_MAX`] requests),
//!   with up to two batches in flight so that the node runs one while the
//!   client answers the other's callers (see [`BATCHES_IN_FLIGHT`] and
//!   `take` for when the next batch goes).
//!
//! Requests are sent in the order they were made (queued ones after those in
//! flight, in queue order, over the node's one connection, which Redis serves
//! in order), which keeps the ordering guarantee of
//! [`Node`](crate::backend::redlock::node::Node): a release always runs after the acquire it
//! undoes. Inside a batch the releases run first where that cannot change
//! any outcome, else in order (see `wire::batch::pipeline`). Each request
//! gets its own result; a batch that fails as a whole (the node died) fails
//! every request in it for that node only, and the quorum layer above sees
//! one reply per node per request, as without batching.
//!
//! Only single-key acquires and releases are batched; multi-key and fenced
//! acquires, extends, renewals (batched by the watchdog already) and
//! replica-acknowledged writes take the direct path. Batches mix keys from
//! any hash slot, so batching is for independent masters, not Redis Cluster
//! members.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesOrdered;

use redis::{RedisError, RedisResult};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::conn::Conn;
use crate::backend::redlock::wire::batch::{self as wire_batch, BATCH_MAX, Op};
use crate::metrics;
use crate::tasks::{BackgroundWork, Tasks};

/// A request's outcome: granted / deleted or not.
type Outcome = RedisResult<bool>;

/// Where a queued request's outcome goes.
type ReplyTo = oneshot::Sender<Outcome>;

/// A node's queue of requests waiting for the one in flight.
#[derive(Debug)]
pub(crate) struct Batcher {
    state: Mutex<State>,
    tasks: Arc<Tasks>,
}

#[derive(Debug, Default)]
struct State {
    /// Requests of this node sent directly and not yet answered.
    direct: usize,
    /// The flush task, while it runs: it has batches in flight or queued
    /// requests to send. Every request queues behind it, so that none
    /// overtakes a queued one or a batch being handed over: the node must
    /// run requests in the order they were made.
    flusher: Option<JoinHandle<()>>,
    queue: Vec<(Op, ReplyTo)>,
    /// When the queue last went from empty to holding a request: how long
    /// the next batch's oldest request waited, for the metrics (one clock
    /// reading per batch, not one per request).
    queued_since: Option<Instant>,
}

impl State {
    /// Whether a flush task is running. A task whose runtime shut down
    /// counts as finished (its batches in flight failed with it), so that a
    /// client used on another runtime starts a new one instead of queueing
    /// behind a task that will never run again.
    fn flushing(&mut self) -> bool {
        if self.flusher.as_ref().is_some_and(JoinHandle::is_finished) {
            self.flusher = None;
        }
        self.flusher.is_some()
    }
}

impl Batcher {
    pub(crate) fn new(tasks: Arc<Tasks>) -> Self {
        Batcher {
            state: Mutex::default(),
            tasks,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the flush task for what is queued, on the current runtime if
    /// there is one; without one, fails the queued requests (nothing could
    /// send them). Called with the state locked and no flush running.
    fn start_flush(self: &Arc<Self>, state: &mut State, conn: &Arc<Conn>) {
        let flush = flush(Arc::clone(self), Arc::clone(conn));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => state.flusher = Some(self.tasks.spawn_on(&runtime, BackgroundWork::Batch, flush)),
            Err(_) => {
                for (_, reply) in state.queue.drain(..) {
                    let _ = reply.send(Err(failure("no runtime to send the batch")));
                }
            }
        }
    }
}

/// Requests that may be sent directly at once before new ones queue up for
/// a batch.
///
/// At least two: a lone caller's release must not wait behind its own
/// acquire, still in flight on a node its lock did not need (the quorum was
/// reached without it). Eight, because a batch of a few requests costs more
/// than sending them directly: redis-rs pipelines direct commands over the
/// one connection, while a batch adds a hop through the flush task and a
/// wake-up, so a few concurrent loops are faster sent directly. Beyond eight
/// the node is busy and batching pays (docs/benchmarks.md has the figures).
const DIRECT_LIMIT: usize = 8;

/// Sends `op` (at once when the node is not busy, else with the next batch)
/// and returns whether it was granted / deleted.
pub(crate) async fn submit(batcher: &Arc<Batcher>, conn: &Arc<Conn>, op: Op) -> RedisResult<bool> {
    let queued = {
        let mut state = batcher.state();
        let flushing = state.flushing();
        if !flushing && state.queue.is_empty() && state.direct < DIRECT_LIMIT {
            state.direct += 1;
            Ok(op)
        } else {
            let (reply, answer) = oneshot::channel();
            if state.queue.is_empty() {
                state.queued_since = Some(Instant::now());
            }
            state.queue.push((op, reply));
            if !flushing && state.direct == 0 {
                // Nothing in flight whose completion would start the flush
                // (a flush or direct requests of a runtime that is gone).
                batcher.start_flush(&mut state, conn);
            }
            Err(answer)
        }
    };
    match queued {
        Err(answer) => answer
            .await
            .unwrap_or_else(|_| Err(failure("the batch carrying this request was abandoned"))),
        Ok(op) => {
            // On completion or cancellation: one fewer in flight, and a
            // flush of what queued up meanwhile.
            let _direct = Direct {
                batcher: Arc::clone(batcher),
                conn: Arc::clone(conn),
            };
            // Boxed: under load nearly every request is queued, and the
            // state of sending one directly (the connection's hand-over)
            // would otherwise make every request's future several times
            // larger (see `crate::backend::redlock::node`'s future-size test).
            Box::pin(async { op.parse(conn.send(|| op.command()).await?) }).await
        }
    }
}

/// A request sent directly, counted until it is answered or dropped.
struct Direct {
    batcher: Arc<Batcher>,
    conn: Arc<Conn>,
}

impl Drop for Direct {
    fn drop(&mut self) {
        let mut state = self.batcher.state();
        state.direct -= 1;
        if state.queue.is_empty() || state.flushing() {
            return;
        }
        self.batcher.start_flush(&mut state, &self.conn);
    }
}

/// Batches a node may have in flight at once.
///
/// Two, so that the node and the client work at the same time: while the
/// node runs one batch, the client answers the callers of the other and
/// gathers their next requests. With one batch in flight they take turns,
/// and each waits while the other works, busy half the time: on one node
/// one batch in flight reached 0.55x raw's throughput with 256 tasks
/// against 1.12x with two. Where the machine is CPU-bound instead (five
/// nodes, 64 tasks) one batch in flight doubles the batches' size and gains
/// nothing (docs/benchmarks.md has both).
const BATCHES_IN_FLIGHT: usize = 2;

/// Sends queued requests in batches, at most [`BATCHES_IN_FLIGHT`] in flight
/// (see [`take`] for when the next one goes), until the queue is empty and
/// every batch is answered.
async fn flush(batcher: Arc<Batcher>, conn: Arc<Conn>) {
    let mut pending = FuturesOrdered::new();
    // Requests in the batches in flight.
    let mut carried = 0;
    loop {
        while pending.len() < BATCHES_IN_FLIGHT {
            let Some((batch, waited)) = take(&batcher, carried) else {
                break;
            };
            carried += batch.len();
            metrics::batch(batch.len(), waited, pending.len() + 1);
            pending.push_back(send(&conn, batch).await);
        }
        match pending.next().await {
            Some((batch, outcomes)) => {
                carried -= batch.len();
                answer(batch, outcomes);
                // Let the callers just answered run before looking at the
                // queue: their next requests (a release after an acquire,
                // the next lock) then join the next batch instead of one of
                // them going alone.
                tokio::task::yield_now().await;
            }
            None => {
                let mut state = batcher.state();
                if state.queue.is_empty() {
                    state.flusher = None;
                    return;
                }
            }
        }
    }
}

/// Takes the next batch off the queue, given the requests `carried` by the
/// batch in flight (`0`: none is).
///
/// With no batch in flight it takes half the queue (rounded up), so that the
/// other half follows at once and the two alternate from then on (see
/// [`BATCHES_IN_FLIGHT`]). With one in flight it takes the whole queue (at
/// most [`BATCH_MAX`]), but only once that holds at least half as many
/// requests as the batch in flight; until then the queue keeps gathering,
/// and the node is spared a stream of small batches, each of which costs it
/// a wake-up and a script call for its releases (the batching tests count
/// the script calls this saves).
///
/// Also returns how long the batch's oldest request waited in the queue (at
/// most: the second half of a queue taken in two waited a little less).
fn take(batcher: &Batcher, carried: usize) -> Option<(Vec<(Op, ReplyTo)>, Duration)> {
    let mut state = batcher.state();
    let queued = state.queue.len();
    if queued == 0 || queued * 2 < carried {
        return None;
    }
    let n = if carried == 0 { queued.div_ceil(2) } else { queued };
    let batch: Vec<_> = state.queue.drain(..n.min(BATCH_MAX)).collect();
    let waited = state.queued_since.map_or(Duration::ZERO, |since| since.elapsed());
    if state.queue.is_empty() {
        state.queued_since = None;
    }
    Some((batch, waited))
}

/// Hands `batch` over to the connection and returns the future of its reply.
async fn send(
    conn: &Arc<Conn>,
    mut batch: Vec<(Op, ReplyTo)>,
) -> impl Future<Output = (Vec<(Op, ReplyTo)>, RedisResult<Vec<Outcome>>)> + use<> {
    let (pipe, layout) = wire_batch::pipeline(&mut batch);
    let started = conn.start_pipeline(pipe).await;
    let conn = Arc::clone(conn);
    async move {
        let replies = match started {
            Ok(started) => conn.finish(started).await,
            Err(error) => Err(error),
        };
        let outcomes = replies.and_then(|replies| wire_batch::outcomes(&batch, layout, replies));
        (batch, outcomes)
    }
}

/// Gives each request of `batch` its outcome, or every one the error that
/// failed the whole batch.
fn answer(batch: Vec<(Op, ReplyTo)>, outcomes: RedisResult<Vec<Outcome>>) {
    match outcomes {
        Ok(outcomes) => {
            for ((_, reply), outcome) in batch.into_iter().zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(error) => {
            for (_, reply) in batch {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

fn failure(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::Client, what))
}
