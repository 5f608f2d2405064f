//! One Redis node: its connection and the commands the lock sends to it.
//!
//! This is the one place that talks to a node, so that acquire, release and
//! renewal share one connection, and concurrent acquires and releases are
//! coalesced here (`crate::batch`). Timeouts are
//! not applied here but by the quorum layer, which owns the per-node budget;
//! what the node does watch is whether its connection still answers at all
//! (see `Conn::stall_limit`), since a request the quorum layer gave up on
//! tells the connection nothing.

mod conn;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{Client, Cmd, FromRedisValue, Pipeline, RedisResult, Value};

pub(crate) use self::conn::Conn;
use crate::batch::{self, Batcher, Op};
use crate::handoff::QueueEntry;
use crate::lock::Resources;
use crate::replica::{Acked, ReplicaAck};
use crate::scripts;
use crate::tasks::Tasks;

/// One independent Redis master taking part in the quorum.
///
/// # Order of requests
///
/// Safety needs one ordering guarantee from this type: a request sent after
/// another one runs after it on the node. A failed acquisition relies on it
/// (its release must run after a SET that may still be queued on a slow
/// node), and so does every release after an extend.
///
/// Redis runs the commands of one connection in the order it reads them, and
/// the redis crate's multiplexed connection writes them in the order they
/// were handed to it. What remains is to hand them over in the order the
/// requests were made, also while the connection is being (re)established,
/// when a crate-level reconnecting manager lets waiting requests go in any
/// order. So every request takes a fair (first come, first served) lock,
/// connects if needed, hands its command to the connection, and only then
/// lets the next request in. The lock is never held while waiting for a reply.
/// A connection with requests still waiting on it is replaced only when
/// those can no longer run after the requests that follow: it broke, or it
/// stayed silent while a new connection to the node answered (see
/// `Conn::replace_if_silent`).
///
/// In replica-acknowledged mode ([`ReplicaAck`]) a lock write and its `WAIT`
/// are handed over as one pipeline, so that they share a connection (see
/// `crate::replica`).
pub(crate) struct Node {
    /// `host:port/db` for messages; never contains the password.
    name: String,
    connect_timeout: Duration,
    conn: Arc<Conn>,
    /// Coalesces concurrent single-key acquires and releases (`None`: off).
    batcher: Option<Arc<Batcher>>,
    /// Replica-acknowledged mode: `WAIT` after every lock write.
    replica_ack: Option<ReplicaAck>,
}

impl Node {
    /// A node that connects on first use (building a client needs neither a
    /// runtime nor a reachable node).
    pub(crate) fn new(client: Client, connect_timeout: Duration, tasks: Arc<Tasks>) -> Self {
        let client = conn::with_socket_options(client);
        let info = client.get_connection_info();
        let name = format!("{}/{}", info.addr(), info.redis_settings().db());
        Node {
            name,
            connect_timeout,
            conn: Arc::new(Conn::new(client, connect_timeout, None)),
            batcher: Some(Arc::new(Batcher::new(tasks))),
            replica_ack: None,
        }
    }

    /// Turns coalescing of concurrent acquires and releases off (`false`).
    pub(crate) fn with_batching(mut self, on: bool) -> Self {
        if !on {
            self.batcher = None;
        }
        self
    }

    /// Follows every lock write (acquire, extend, renewal) with `WAIT`.
    pub(crate) fn with_replica_ack(mut self, ack: Option<ReplicaAck>) -> Self {
        self.replica_ack = ack;
        // A `WAIT` holds back every later reply on its connection: the
        // stall limit must allow for it. Built before any request, so no
        // connection is lost here.
        let wait = ack.map(|ack| ack.timeout());
        self.conn = Arc::new(Conn::new(self.conn.client().clone(), self.connect_timeout, wait));
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The client, for connections other than the request connection
    /// (pub/sub).
    pub(crate) fn client(&self) -> &Client {
        self.conn.client()
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Sends `cmd` in request order (see the type docs) and awaits its reply.
    pub(crate) async fn send<T: FromRedisValue>(&self, cmd: Cmd) -> RedisResult<T> {
        self.conn.send(cmd).await
    }

    /// Sends the commands of `pipe` in request order as one unit.
    pub(crate) async fn send_pipeline(&self, pipe: Pipeline) -> RedisResult<Vec<Value>> {
        self.conn.send_pipeline(pipe).await
    }

    /// Sends a lock write; in replica-acknowledged mode followed by `WAIT`
    /// in the same pipeline. Returns its reply and whether the replicas
    /// acknowledged it (always `Ok` outside that mode).
    async fn send_acked(&self, cmd: Cmd) -> RedisResult<(Value, Acked<()>)> {
        if self.replica_ack.is_none() {
            return Ok((self.send::<Value>(cmd).await?.extract_error()?, Ok(())));
        }
        // Boxed: replica mode only, and its pipeline future would double
        // the size of every acquire's future.
        let (mut replies, acked) = Box::pin(self.send_all_acked(vec![cmd])).await?;
        Ok((replies.pop().ok_or_else(wrong_reply_count)?, acked))
    }

    /// [`Node::send_acked`] for several commands, sent as one pipeline.
    async fn send_all_acked(&self, cmds: Vec<Cmd>) -> RedisResult<(Vec<Value>, Acked<()>)> {
        let mut pipe = redis::pipe();
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        if let Some(ack) = &self.replica_ack {
            pipe.add_command(ack.wait_cmd());
        }
        let mut replies = self.send_pipeline(pipe).await?;
        let acked = match &self.replica_ack {
            Some(ack) => ack.check(replies.pop().ok_or_else(wrong_reply_count)?),
            None => Ok(()),
        };
        let replies = replies
            .into_iter()
            .map(Value::extract_error)
            .collect::<RedisResult<_>>()?;
        Ok((replies, acked))
    }

    /// `SET NX PX` for one key, the acquire script for several; with
    /// `fence`, the fenced acquire script, whose fence value is folded into
    /// `fence` (a running maximum). Returns whether this node granted every
    /// key; in replica-acknowledged mode, a grant the replicas did not
    /// acknowledge is deleted again and reported as the node's error.
    ///
    /// With `queue` (a waiter's attempt on a single resource, unfenced), a
    /// refusal also queues the waiter on this node, in the same script call.
    pub(crate) async fn acquire(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
        fence: Option<&AtomicU64>,
        queue: Option<&QueueEntry>,
    ) -> RedisResult<Acked<bool>> {
        let ttl_ms = millis(ttl);
        let queue = queue.filter(|_| keys.len() == 1 && fence.is_none());
        if let ([key], None, None, None, Some(batcher)) =
            (keys, fence, queue, &self.replica_ack, &self.batcher)
        {
            let op = Op::Acquire {
                key: key.clone(),
                token: token.into(),
                ttl_ms,
            };
            return Ok(Ok(batch::submit(batcher, &self.conn, op).await? == 1));
        }
        // Boxed: kept inline, the larger state of this path would be part of
        // every acquire's future, batched ones included (each is built and
        // boxed per node and attempt; above about 1 KB an allocation leaves
        // the allocator's fast path).
        Box::pin(self.acquire_direct(keys, token, ttl_ms, fence, queue)).await
    }

    /// [`Node::acquire`] as one command of its own (multi-key, fenced,
    /// queueing, replica-acknowledged, or batching off).
    async fn acquire_direct(
        &self,
        keys: &[String],
        token: &str,
        ttl_ms: u64,
        fence: Option<&AtomicU64>,
        queue: Option<&QueueEntry>,
    ) -> RedisResult<Acked<bool>> {
        let cmd = if fence.is_some() {
            let fence_keys: Vec<String> = keys.iter().map(|k| crate::keys::fence(k)).collect();
            let mut cmd = scripts::FENCED_ACQUIRE.call();
            cmd.arg(keys.len() * 2)
                .arg(keys)
                .arg(&fence_keys)
                .arg(token)
                .arg(ttl_ms);
            cmd
        } else if let Some(entry) = queue {
            let mut cmd = scripts::ACQUIRE_OR_QUEUE.call();
            cmd.arg(2)
                .arg(keys)
                .arg(&entry.queues[0])
                .arg(token)
                .arg(ttl_ms)
                .arg(entry.place)
                .arg(&*entry.member)
                .arg(entry.ttl_ms.to_string());
            cmd
        } else if let [key] = keys {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            cmd
        } else {
            let mut cmd = scripts::ACQUIRE.eval(keys);
            cmd.arg(token).arg(ttl_ms);
            cmd
        };
        let (reply, acked) = self.send_acked(cmd).await?;
        let granted = if let Some(fence) = fence {
            let [granted, value] = integers("the fenced acquire script", reply)?[..] else {
                return Err(wrong_reply_count());
            };
            fence.fetch_max(u64::try_from(value).unwrap_or(0), Ordering::Relaxed);
            granted == 1
        } else if keys.len() == 1 && queue.is_none() {
            set_nx_granted(reply)?
        } else {
            integer("the acquire script", reply)? == 1
        };
        match acked {
            Err(missing) if granted => {
                // A grant the replicas may not have is no grant: take it
                // back before the node is counted as failed, so that it
                // keeps no key of ours even if the attempt succeeds.
                // (Boxed: a rare path that would double the size of every
                // acquire's future.)
                if let Err(error) = Box::pin(self.release(keys, token)).await {
                    tracing::debug!(node = self.name(), %error, "release of an unacknowledged grant failed");
                }
                Ok(Err(missing))
            }
            _ => Ok(Ok(granted)),
        }
    }

    /// Fenced acquire, phase 2: proposes `token` for the fence keys.
    /// Returns whether the node accepted it, and its highest fence.
    pub(crate) async fn propose_fence(&self, fence_keys: &[String], token: u64) -> RedisResult<(bool, u64)> {
        let mut cmd = scripts::PROPOSE.eval(fence_keys);
        cmd.arg(token).arg(millis(crate::fence::FENCE_RETENTION));
        let [accepted, highest] = integers("the fence proposal script", self.send(cmd).await?)?[..] else {
            return Err(wrong_reply_count());
        };
        Ok((accepted == 1, u64::try_from(highest).unwrap_or(0)))
    }

    /// Owner-checked delete. Returns how many keys still held our token.
    pub(crate) async fn release(&self, keys: &[String], token: &str) -> RedisResult<usize> {
        if let ([key], Some(batcher)) = (keys, &self.batcher) {
            let op = Op::Release {
                key: key.clone(),
                token: token.into(),
            };
            return Ok(usize::from(batch::submit(batcher, &self.conn, op).await? == 1));
        }
        let mut cmd = scripts::RELEASE.eval(keys);
        cmd.arg(token).arg(crate::handoff::unix_ms());
        // Boxed for the reason `acquire` boxes its direct path.
        let deleted = integer("the release script", Box::pin(self.send(cmd)).await?)?;
        usize::try_from(deleted).map_err(|_| unexpected("the release script", &Value::Int(deleted)))
    }

    /// Owner-checked ttl reset. Returns whether every key held our token;
    /// in replica-acknowledged mode, an extend the replicas did not
    /// acknowledge is the node's error (and is not undone).
    pub(crate) async fn extend(
        &self,
        keys: &[String],
        token: &str,
        ttl: Duration,
    ) -> RedisResult<Acked<bool>> {
        let mut cmd = scripts::EXTEND.eval(keys);
        cmd.arg(token).arg(millis(ttl));
        let (reply, acked) = self.send_acked(cmd).await?;
        if integer("the extend script", reply)? == 1 {
            Ok(acked.map(|()| true))
        } else {
            Ok(Ok(false))
        }
    }
}

/// One lock in a watchdog renewal batch.
#[derive(Debug)]
pub(crate) struct RenewItem {
    pub(crate) keys: Resources,
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
}

/// Keys per renewal script call. Redis runs a script without serving
/// anything else; 512 keys keep one call well under a millisecond of server
/// time, and larger batches are split into several calls sent back to back.
/// Counted in keys, not locks, because a lock may have up to
/// [`scripts::MAX_LOCK_KEYS`] resources; a lock is never split across calls
/// (its keys are renewed together or not at all), which the assertion below
/// keeps possible.
pub(crate) const RENEW_CHUNK_KEYS: usize = 512;

const _: () = assert!(RENEW_CHUNK_KEYS >= scripts::MAX_LOCK_KEYS);

/// Splits `items` into runs of whole locks with at most [`RENEW_CHUNK_KEYS`]
/// keys each (a lock with more keys than that, which the per-lock limit
/// rules out, goes alone).
fn renew_chunks(items: &[RenewItem]) -> impl Iterator<Item = &[RenewItem]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut keys = 0;
        let len = rest
            .iter()
            .take_while(|item| {
                keys += item.keys.names().len();
                keys <= RENEW_CHUNK_KEYS
            })
            .count()
            .max(1);
        let (chunk, tail) = rest.split_at(len);
        rest = tail;
        Some(chunk)
    })
}

impl Node {
    /// Renews `items` owner-checked in script calls of at most
    /// [`RENEW_CHUNK_KEYS`] keys each, sent as one pipeline; returns one
    /// status per item (see [`scripts::RENEW`]). In replica-acknowledged
    /// mode, a renewal the replicas did not acknowledge is the node's error
    /// for every item.
    pub(crate) async fn renew(&self, items: &[RenewItem], heal: bool) -> RedisResult<Acked<Vec<i64>>> {
        let calls = renew_chunks(items)
            .map(|chunk| {
                let keys: Vec<&String> = chunk.iter().flat_map(|item| item.keys.names()).collect();
                let mut cmd = scripts::RENEW.call();
                cmd.arg(keys.len()).arg(keys).arg(if heal { "1" } else { "0" });
                for item in chunk {
                    cmd.arg(item.keys.names().len())
                        .arg(&*item.token)
                        .arg(millis(item.ttl));
                }
                cmd
            })
            .collect();
        // One hand-over, answered in order: one round trip for all chunks.
        let (replies, acked) = self.send_all_acked(calls).await?;
        let mut statuses = Vec::with_capacity(items.len());
        for reply in replies {
            statuses.extend(integers("the renewal script", reply)?);
        }
        if statuses.len() != items.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "renewal script returned the wrong number of statuses",
            )));
        }
        Ok(acked.map(|()| statuses))
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Node").field(&self.name).finish()
    }
}

/// A ttl in whole milliseconds, the unit of `PX` and `PEXPIRE`.
/// The builder rejects ttls below one millisecond.
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// A script's reply, which must be an integer: the lock's scripts return Lua
/// numbers, which Redis sends as RESP integers. The redis crate would also
/// read a string such as "1" as a number, so a node answering out of step
/// with its requests (or not Redis at all) could confirm an operation.
pub(crate) fn integer(what: &'static str, reply: Value) -> RedisResult<i64> {
    match reply.extract_error()? {
        Value::Int(n) => Ok(n),
        other => Err(unexpected(what, &other)),
    }
}

/// A script's reply that must be an array of integers.
pub(crate) fn integers(what: &'static str, reply: Value) -> RedisResult<Vec<i64>> {
    match reply.extract_error()? {
        Value::Array(items) => items.into_iter().map(|item| integer(what, item)).collect(),
        other => Err(unexpected(what, &other)),
    }
}

/// `SET NX` answers `+OK` (set) or nil (the key exists). Any other reply does
/// not answer this request (a connection out of step, something else on the
/// port): a failed node, never a grant.
pub(crate) fn set_nx_granted(reply: Value) -> RedisResult<bool> {
    match reply.extract_error()? {
        Value::Okay => Ok(true),
        Value::SimpleString(s) if s == "OK" => Ok(true),
        Value::Nil => Ok(false),
        other => Err(unexpected("SET NX", &other)),
    }
}

/// The error for a reply the command never gives: a failed node.
fn unexpected(what: &'static str, reply: &Value) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected reply type",
        format!("{what} answered {reply:?}"),
    ))
}

/// A pipeline answered with a different number of replies than it had
/// commands (a broken server or proxy).
fn wrong_reply_count() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "pipeline answered with the wrong number of replies",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every lock operation builds one request future per node and boxes
    /// it (see `quorum::gather`), and its size is copied and allocated per
    /// node and operation. glibc serves allocations of up to 1,032 bytes
    /// from a per-thread cache; larger ones take its general path, which
    /// cost about 14 % of the client's CPU per cycle at N = 5 with 64 tasks
    /// when these futures were 2-2.6 KB. Under load nearly every request
    /// waits in its node's batch queue, which needs little state; sending a
    /// request directly (the connection's ordered hand-over) needs about
    /// 700 bytes more and is boxed on its own (`batch::submit`,
    /// `Node::release`), which took the futures from 1,000 and 928 bytes to
    /// 280 and 240. The limit keeps them there, with room to grow.
    fn lock_of(keys: usize) -> RenewItem {
        let names: Vec<String> = (0..keys).map(|i| format!("k{i}")).collect();
        RenewItem {
            keys: Resources::from(names),
            token: Arc::from("t"),
            ttl: Duration::from_secs(1),
        }
    }

    /// Renewal calls are bounded by keys, whatever the number of resources
    /// per lock, and never split a lock.
    #[test]
    fn renewal_chunks_count_keys_and_keep_locks_whole() {
        let sizes = [1, 64, 300, 200, 13, 512, 1, 600, 64];
        let items: Vec<RenewItem> = sizes.iter().map(|&n| lock_of(n)).collect();
        let chunks: Vec<&[RenewItem]> = renew_chunks(&items).collect();
        let total: usize = chunks.iter().map(|c| c.len()).sum();
        assert_eq!(total, items.len(), "every lock in exactly one call");
        for chunk in &chunks {
            let keys: usize = chunk.iter().map(|i| i.keys.names().len()).sum();
            assert!(
                keys <= RENEW_CHUNK_KEYS || chunk.len() == 1,
                "{keys} keys in a call of {} locks",
                chunk.len()
            );
        }
        let per_call: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
        assert_eq!(per_call, [3, 2, 1, 1, 1, 1], "greedy runs of whole locks");
        // 512 single-key locks fit one call, the 513th starts the next.
        let singles: Vec<RenewItem> = (0..513).map(|_| lock_of(1)).collect();
        let per_call: Vec<usize> = renew_chunks(&singles).map(<[RenewItem]>::len).collect();
        assert_eq!(per_call, [512, 1]);
    }

    #[test]
    fn request_futures_stay_small() {
        const LIMIT: usize = 512;
        let client = Client::open("redis://127.0.0.1:1/").expect("a valid URL");
        let node = Node::new(client, Duration::from_secs(1), Arc::default());
        let keys = vec!["k".to_owned()];
        let acquire = node.acquire(&keys, "token", Duration::from_secs(1), None, None);
        let release = node.release(&keys, "token");
        let sizes = (size_of_val(&acquire), size_of_val(&release));
        assert!(
            sizes.0 <= LIMIT && sizes.1 <= LIMIT,
            "acquire, release: {sizes:?} bytes"
        );
    }
}
