//! Coalescing of concurrent acquires and releases into one script call per
//! node.
//!
//! Under load, a lock's cost is dominated by per-command overhead in the
//! servers and the client (parsing, system calls, wake-ups), not by the work
//! of `SET NX`. So each node batches adaptively, with no timer and no delay
//! for a lone caller:
//! - a request that finds the node nearly idle (fewer than two requests in
//!   flight, nothing queued) is sent at once, as its usual single command,
//!   by the caller itself;
//! - requests that arrive while the node is busier queue up, and are sent
//!   together as one [`scripts::BATCH`] call (at most [`BATCH_MAX`] each) by
//!   a background task, one batch in flight at a time: the next batch
//!   gathers while the previous one is answered.
//!
//! Requests are sent in the order they were made (queued ones after the one
//! in flight, in queue order, each batch run in order on the node), which
//! keeps the ordering guarantee of [`Node`](crate::node::Node): a release
//! always runs after the acquire it undoes. Each request gets its own result;
//! a batch that fails as a whole (the node died) fails every request in it
//! for that node only, and the quorum layer above sees one reply per node per
//! request, as without batching.
//!
//! Only single-key acquires and releases are batched; multi-key and fenced
//! acquires, extends, renewals (batched by the watchdog already) and
//! replica-acknowledged writes take the direct path. Batches mix keys from
//! any hash slot, so batching is for independent masters, not Redis Cluster
//! members.

use std::sync::{Arc, Mutex, MutexGuard};

use redis::{RedisError, RedisResult};
use tokio::sync::oneshot;

use crate::handoff;
use crate::node::{self, Conn};
use crate::scripts;

/// Requests per batch script call. Redis serves nothing else while a script
/// runs; 512 single-key operations take well under a millisecond.
pub(crate) const BATCH_MAX: usize = 512;

/// One batchable request.
#[derive(Debug)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl`.
    Acquire {
        key: String,
        token: Arc<str>,
        ttl_ms: u64,
    },
    /// Owner-checked delete of `key`, announced for waiters.
    Release { key: String, token: Arc<str> },
}

type Reply = oneshot::Sender<RedisResult<i64>>;

/// A node's queue of requests waiting for the one in flight.
#[derive(Debug, Default)]
pub(crate) struct Batcher {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Requests and batches of this node handed over and not yet answered.
    in_flight: usize,
    /// A flush task is running.
    flushing: bool,
    /// The flush task has taken a batch from the queue but not yet handed
    /// it over: nothing may go directly now, or it could overtake the batch.
    taking: bool,
    queue: Vec<(Op, Reply)>,
}

impl Batcher {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Requests that may be in flight before new ones queue up for a batch.
///
/// Two, not one: a lone caller's release must not wait behind its own
/// acquire, still in flight on a node its lock did not need (the quorum was
/// reached without it); beyond two, the node is busy and batching pays.
const DIRECT_LIMIT: usize = 2;

/// Sends `op` (at once when the node is not busy, else with the next batch)
/// and returns its status: `1` granted / deleted, `0` refused / not ours.
pub(crate) async fn submit(batcher: &Arc<Batcher>, conn: &Arc<Conn>, op: Op) -> RedisResult<i64> {
    let queued = {
        let mut state = batcher.state();
        // Nothing may overtake a queued request or a batch being taken: the
        // node must run requests in the order they were made.
        if state.queue.is_empty() && !state.taking && state.in_flight < DIRECT_LIMIT {
            state.in_flight += 1;
            Ok(op)
        } else {
            let (reply, answer) = oneshot::channel();
            state.queue.push((op, reply));
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
            single(conn, &op).await
        }
    }
}

/// A request sent directly, counted in flight until it is answered or dropped.
struct Direct {
    batcher: Arc<Batcher>,
    conn: Arc<Conn>,
}

impl Drop for Direct {
    fn drop(&mut self) {
        let mut state = self.batcher.state();
        state.in_flight -= 1;
        if state.queue.is_empty() || state.flushing {
            return;
        }
        state.flushing = true;
        drop(state);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(flush(Arc::clone(&self.batcher), Arc::clone(&self.conn)));
            }
            Err(_) => {
                let mut state = self.batcher.state();
                for (_, reply) in state.queue.drain(..) {
                    let _ = reply.send(Err(failure("no runtime to send the batch")));
                }
                state.flushing = false;
            }
        }
    }
}

/// Sends queued requests in batches, one batch in flight at a time (the
/// next gathers while it is), until the queue is empty.
async fn flush(batcher: Arc<Batcher>, conn: Arc<Conn>) {
    loop {
        let batch: Vec<(Op, Reply)> = {
            let mut state = batcher.state();
            if state.queue.is_empty() {
                state.flushing = false;
                return;
            }
            let n = state.queue.len().min(BATCH_MAX);
            state.taking = true;
            state.in_flight += 1;
            state.queue.drain(..n).collect()
        };
        let cmd = if let [(op, _)] = batch.as_slice() {
            single_command(op)
        } else {
            batch_command(&batch)
        };
        let started = conn.start_command(cmd).await;
        // Handed over (or failed): direct requests may go again.
        batcher.state().taking = false;
        let reply = match started {
            Ok(started) => conn.finish(started).await,
            Err(error) => Err(error),
        };
        batcher.state().in_flight -= 1;
        let statuses = reply.and_then(|reply| {
            if batch.len() == 1 {
                single_status(&batch[0].0, reply).map(|status| vec![status])
            } else {
                let statuses = node::integers("the batch script", reply)?;
                if statuses.len() == batch.len() {
                    Ok(statuses)
                } else {
                    Err(failure("batch script returned the wrong number of statuses"))
                }
            }
        });
        match statuses {
            Ok(statuses) => {
                for ((_, reply), status) in batch.into_iter().zip(statuses) {
                    let _ = reply.send(if status < 0 {
                        Err(failure("the key holds a value of the wrong type"))
                    } else {
                        Ok(status)
                    });
                }
            }
            Err(error) => {
                for (_, reply) in batch {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
        // Let the callers just answered run before looking at the queue:
        // their next requests (a release after an acquire, the next lock)
        // then join the next batch instead of one of them going alone.
        tokio::task::yield_now().await;
    }
}

/// One request as its usual single command.
async fn single(conn: &Conn, op: &Op) -> RedisResult<i64> {
    single_status(op, conn.send(single_command(op)).await?)
}

/// The usual single command of a request: `SET NX PX`, or the release script.
fn single_command(op: &Op) -> redis::Cmd {
    match op {
        Op::Acquire { key, token, ttl_ms } => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(&**token).arg("NX").arg("PX").arg(ttl_ms);
            cmd
        }
        Op::Release { key, token } => {
            let mut cmd = scripts::RELEASE.eval(std::slice::from_ref(key));
            cmd.arg(&**token).arg(handoff::unix_ms());
            cmd
        }
    }
}

/// The status of a request from the reply to its single command.
fn single_status(op: &Op, reply: redis::Value) -> RedisResult<i64> {
    match op {
        Op::Acquire { .. } => Ok(i64::from(node::set_nx_granted(reply)?)),
        Op::Release { .. } => node::integer("the release script", reply),
    }
}

/// Several requests as one batch script call.
fn batch_command(batch: &[(Op, Reply)]) -> redis::Cmd {
    let mut cmd = scripts::BATCH.call();
    cmd.arg(batch.len());
    for (op, _) in batch {
        cmd.arg(match op {
            Op::Acquire { key, .. } | Op::Release { key, .. } => key,
        });
    }
    cmd.arg(handoff::unix_ms());
    for (op, _) in batch {
        match op {
            Op::Acquire { token, ttl_ms, .. } => cmd.arg("a").arg(&**token).arg(ttl_ms),
            Op::Release { token, .. } => cmd.arg("r").arg(&**token),
        };
    }
    cmd
}

fn failure(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::Client, what))
}
