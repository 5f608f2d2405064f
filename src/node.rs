//! One Redis node: its connection and the commands the lock sends to it.
//!
//! This is the one place that talks to a node, so that acquire, release and
//! renewal share one connection (and can later be batched here). Timeouts are
//! not applied here but by the quorum layer, which owns the per-node budget.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Value};
use tokio::sync::Mutex;

use crate::lock::Resources;
use crate::scripts;

/// Numbers connections, so that a failed request discards only its own.
static GENERATION: AtomicU64 = AtomicU64::new(0);

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
pub(crate) struct Node {
    /// `host:port/db` for messages; never contains the password.
    name: String,
    client: Client,
    config: AsyncConnectionConfig,
    /// The live connection, if any, with a generation number so that a
    /// request that saw it fail discards that connection and not a newer one.
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
}

impl Node {
    /// A node that connects on first use (building a client needs neither a
    /// runtime nor a reachable node).
    pub(crate) fn new(client: Client, connect_timeout: Duration) -> Self {
        let info = client.get_connection_info();
        let name = format!("{}/{}", info.addr(), info.redis_settings().db());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // The quorum layer bounds every request with its own deadline; a
            // release may rightly wait longer than any default here.
            .set_response_timeout(None);
        Node {
            name,
            client,
            config,
            conn: Mutex::new(None),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Sends `cmd` in request order (see the type docs) and awaits its reply.
    ///
    /// A node that is down fails the request at once (connection refused)
    /// or after the connect timeout; the next request tries to connect
    /// again, so a restarted node takes part as soon as it is back.
    pub(crate) async fn send<T: FromRedisValue>(&self, cmd: Cmd) -> RedisResult<T> {
        let (generation, mut reply) = {
            let mut slot = self.conn.lock().await;
            let (generation, conn) = match &*slot {
                Some((generation, conn)) => (*generation, conn.clone()),
                None => {
                    let conn = self
                        .client
                        .get_multiplexed_async_connection_with_config(&self.config)
                        .await?;
                    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
                    *slot = Some((generation, conn.clone()));
                    (generation, conn)
                }
            };
            let mut reply = Box::pin(async move {
                let mut conn = conn;
                conn.send_packed_command(&cmd).await
            });
            // The first poll hands the command to the connection's writer
            // queue (or takes a place in its fair wait for room): this fixes
            // its position before the next request may go.
            if let Poll::Ready(result) = futures::poll!(reply.as_mut()) {
                drop(slot);
                return self.settle(generation, result).await;
            }
            (generation, reply)
        };
        let result = reply.as_mut().await;
        self.settle(generation, result).await
    }

    /// Sends `cmd` (see [`Node::send`]) and returns its reply as a raw value,
    /// for the caller to check its type; an error reply is an `Err`.
    async fn reply(&self, cmd: Cmd) -> RedisResult<Value> {
        self.send::<Value>(cmd).await?.extract_error()
    }

    /// Drops the connection after an error that leaves it unusable, so that
    /// the next request reconnects; converts the reply.
    async fn settle<T: FromRedisValue>(
        &self,
        generation: u64,
        result: RedisResult<redis::Value>,
    ) -> RedisResult<T> {
        if let Err(e) = &result
            && (e.is_unrecoverable_error() || e.is_connection_dropped())
        {
            let mut slot = self.conn.lock().await;
            if slot.as_ref().is_some_and(|(g, _)| *g == generation) {
                *slot = None;
            }
        }
        Ok(redis::from_redis_value(result?)?)
    }

    /// `SET NX PX` for one key, the acquire script for several.
    /// Returns whether this node granted every key.
    pub(crate) async fn acquire(&self, keys: &[String], token: &str, ttl: Duration) -> RedisResult<bool> {
        let ttl_ms = millis(ttl);
        if let [key] = keys {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            // SET NX answers +OK (set) or nil (the key exists). Any other
            // reply does not answer this request (a connection out of step,
            // something else on the port): a failed node, never a grant. The
            // redis crate would turn an integer or a bulk string into
            // `Some(String)`, so the reply is checked as a raw value.
            match self.reply(cmd).await? {
                Value::Okay => Ok(true),
                Value::SimpleString(s) if s == "OK" => Ok(true),
                Value::Nil => Ok(false),
                other => Err(unexpected("SET NX", &other)),
            }
        } else {
            let mut cmd = scripts::eval(scripts::ACQUIRE, keys);
            cmd.arg(token).arg(ttl_ms);
            Ok(integer("the acquire script", self.reply(cmd).await?)? == 1)
        }
    }

    /// Owner-checked delete. Returns how many keys still held our token.
    pub(crate) async fn release(&self, keys: &[String], token: &str) -> RedisResult<usize> {
        let mut cmd = scripts::eval(scripts::RELEASE, keys);
        cmd.arg(token);
        let deleted = integer("the release script", self.reply(cmd).await?)?;
        usize::try_from(deleted).map_err(|_| unexpected("the release script", &Value::Int(deleted)))
    }

    /// Owner-checked ttl reset. Returns whether every key held our token.
    pub(crate) async fn extend(&self, keys: &[String], token: &str, ttl: Duration) -> RedisResult<bool> {
        let mut cmd = scripts::eval(scripts::EXTEND, keys);
        cmd.arg(token).arg(millis(ttl));
        Ok(integer("the extend script", self.reply(cmd).await?)? == 1)
    }
}

/// A script's reply, which must be an integer: the lock's scripts return
/// Lua numbers, which Redis sends as RESP integers. The redis crate would
/// also read a string such as "1" as a number, so a node answering out of
/// step with its requests (or not Redis at all) could confirm an operation.
fn integer(what: &'static str, reply: Value) -> RedisResult<i64> {
    match reply {
        Value::Int(n) => Ok(n),
        other => Err(unexpected(what, &other)),
    }
}

/// The error for a reply the command never gives: a failed node.
fn unexpected(what: &'static str, reply: &Value) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "unexpected reply type",
        format!("{what} answered {reply:?}"),
    ))
}

/// One lock in a watchdog renewal batch.
#[derive(Debug)]
pub(crate) struct RenewItem {
    pub(crate) keys: Resources,
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
}

/// Locks per renewal script call. Redis runs a script without serving
/// anything else; 512 locks keep one call well under a millisecond of server
/// time, and larger batches are split into several calls sent back to back.
pub(crate) const RENEW_CHUNK: usize = 512;

impl Node {
    /// Renews `items` owner-checked in one script call per [`RENEW_CHUNK`]
    /// locks; returns one status per item (see [`scripts::RENEW`]).
    pub(crate) async fn renew(&self, items: &[RenewItem], heal: bool) -> RedisResult<Vec<i64>> {
        let calls = items.chunks(RENEW_CHUNK).map(|chunk| {
            let keys: Vec<&String> = chunk.iter().flat_map(|item| item.keys.names()).collect();
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(scripts::RENEW)
                .arg(keys.len())
                .arg(keys)
                .arg(if heal { "1" } else { "0" });
            for item in chunk {
                cmd.arg(item.keys.names().len())
                    .arg(&*item.token)
                    .arg(millis(item.ttl));
            }
            async move {
                match self.reply(cmd).await? {
                    Value::Array(statuses) => statuses
                        .into_iter()
                        .map(|status| integer("the renewal script", status))
                        .collect::<RedisResult<Vec<i64>>>(),
                    other => Err(unexpected("the renewal script", &other)),
                }
            }
        });
        // Sent in order, answered in order: one round trip for all chunks.
        let replies = futures::future::try_join_all(calls).await?;
        let statuses: Vec<i64> = replies.into_iter().flatten().collect();
        if statuses.len() != items.len() {
            return Err(RedisError::from((
                ErrorKind::Parse,
                "renewal script returned the wrong number of statuses",
            )));
        }
        Ok(statuses)
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
