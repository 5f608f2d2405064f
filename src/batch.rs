//! Coalescing of concurrent acquires and releases into one script call per
//! node.
//!
//! Under load, a lock's cost is dominated by per-command overhead in the
//! servers and the client (parsing, system calls, wake-ups), not by the work
//! of `SET NX`. So each node batches adaptively, with no timer and no delay
//! for a lone caller:
//! - a request that finds the node idle is sent at once, as its usual single
//!   command, by the caller itself;
//! - requests that arrive while a request or batch of this node is in
//!   flight queue up, and are sent together as one [`scripts::BATCH`] call
//!   (at most [`BATCH_MAX`] each) as soon as the one in flight has answered,
//!   by a background task that keeps flushing until the queue is empty.
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
    /// A request or batch of this node is in flight.
    busy: bool,
    queue: Vec<(Op, Reply)>,
}

impl Batcher {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sends `op` (at once when the node is idle, else with the next batch) and
/// returns its status: `1` granted / deleted, `0` refused / not ours.
pub(crate) async fn submit(batcher: &Arc<Batcher>, conn: &Arc<Conn>, op: Op) -> RedisResult<i64> {
    let queued = {
        let mut state = batcher.state();
        if state.busy {
            let (reply, answer) = oneshot::channel();
            state.queue.push((op, reply));
            Err(answer)
        } else {
            state.busy = true;
            Ok(op)
        }
    };
    match queued {
        Err(answer) => answer
            .await
            .unwrap_or_else(|_| Err(failure("the batch carrying this request was abandoned"))),
        Ok(op) => {
            // Hands the queue on when this request completes or is dropped.
            let _leader = Leader {
                batcher: Arc::clone(batcher),
                conn: Arc::clone(conn),
            };
            single(conn, &op).await
        }
    }
}

/// The caller that sent a request directly; on drop (answer or cancellation)
/// it either marks the node idle or starts a flush of what queued up meanwhile.
struct Leader {
    batcher: Arc<Batcher>,
    conn: Arc<Conn>,
}

impl Drop for Leader {
    fn drop(&mut self) {
        let mut state = self.batcher.state();
        if state.queue.is_empty() {
            state.busy = false;
            return;
        }
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
                state.busy = false;
            }
        }
    }
}

/// Sends queued requests in batches until the queue is empty, then marks
/// the node idle.
async fn flush(batcher: Arc<Batcher>, conn: Arc<Conn>) {
    loop {
        let batch: Vec<(Op, Reply)> = {
            let mut state = batcher.state();
            if state.queue.is_empty() {
                state.busy = false;
                return;
            }
            let n = state.queue.len().min(BATCH_MAX);
            state.queue.drain(..n).collect()
        };
        let statuses = if let [(op, _)] = batch.as_slice() {
            single(&conn, op).await.map(|status| vec![status])
        } else {
            several(&conn, &batch).await
        };
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
    match op {
        Op::Acquire { key, token, ttl_ms } => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(&**token).arg("NX").arg("PX").arg(ttl_ms);
            Ok(i64::from(node::set_nx_granted(conn.send(cmd).await?)?))
        }
        Op::Release { key, token } => {
            let mut cmd = scripts::eval(scripts::RELEASE, std::slice::from_ref(key));
            cmd.arg(&**token);
            node::integer("the release script", conn.send(cmd).await?)
        }
    }
}

/// Several requests as one batch script call.
async fn several(conn: &Conn, batch: &[(Op, Reply)]) -> RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(scripts::BATCH).arg(batch.len());
    for (op, _) in batch {
        cmd.arg(match op {
            Op::Acquire { key, .. } | Op::Release { key, .. } => key,
        });
    }
    for (op, _) in batch {
        match op {
            Op::Acquire { token, ttl_ms, .. } => cmd.arg("a").arg(&**token).arg(ttl_ms),
            Op::Release { token, .. } => cmd.arg("r").arg(&**token),
        };
    }
    let statuses = node::integers("the batch script", conn.send(cmd).await?)?;
    if statuses.len() != batch.len() {
        return Err(failure("batch script returned the wrong number of statuses"));
    }
    Ok(statuses)
}

fn failure(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::Client, what))
}
