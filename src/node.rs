//! One Redis node: its connection and the commands the lock sends to it.
//!
//! This is the one place that talks to a node, so that acquire, release and
//! renewal share one connection (and can later be batched here). Timeouts are
//! not applied here but by the quorum layer, which owns the per-node budget.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisResult};
use tokio::sync::OnceCell;

use crate::scripts;

/// Longest pause between two reconnection attempts to a node that went away.
///
/// The connection manager backs off exponentially from 100 ms; without a cap a
/// node that comes back after a restart could wait seconds for its next
/// attempt and be missing from quorums for that long.
pub(crate) const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);

/// One independent Redis master taking part in the quorum.
pub(crate) struct Node {
    /// `host:port/db` for messages; never contains the password.
    name: String,
    client: Client,
    connect_timeout: Duration,
    /// Created on first use, inside the caller's runtime, so that building a
    /// [`crate::Redlock`] needs neither a runtime nor a reachable node.
    conn: OnceCell<ConnectionManager>,
}

impl Node {
    pub(crate) fn new(client: Client, connect_timeout: Duration) -> Self {
        let info = client.get_connection_info();
        let name = format!("{}/{}", info.addr(), info.redis_settings().db());
        Node {
            name,
            client,
            connect_timeout,
            conn: OnceCell::new(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A handle on the node's one multiplexed connection (cheap to clone).
    ///
    /// Every request to this node goes over this single connection, so Redis
    /// executes them in the order they were sent: a release sent after a SET
    /// that timed out on our side still runs after that SET on the server,
    /// which is why a failed attempt cannot leak a key.
    async fn connection(&self) -> RedisResult<ConnectionManager> {
        self.conn
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.connect_timeout))
                    // The quorum layer bounds every request with its own timeout.
                    .set_response_timeout(None)
                    // Connect once per request that finds the node down
                    // instead of retrying inside it: a dead node then fails
                    // at once (connection refused) rather than eating the
                    // whole per-node timeout, and a restarted node is picked
                    // up by the next request.
                    .set_number_of_retries(0)
                    .set_max_delay(RECONNECT_MAX_DELAY);
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            })
            .await
            .cloned()
    }

    /// `SET NX PX` for one key, the acquire script for several.
    /// Returns whether this node granted every key.
    pub(crate) async fn acquire(&self, keys: &[String], token: &str, ttl: Duration) -> RedisResult<bool> {
        let mut conn = self.connection().await?;
        let ttl_ms = millis(ttl);
        if let [key] = keys {
            let reply: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(&mut conn)
                .await?;
            Ok(reply.is_some())
        } else {
            let set: i64 = scripts::eval(scripts::ACQUIRE, keys)
                .arg(token)
                .arg(ttl_ms)
                .query_async(&mut conn)
                .await?;
            Ok(set == 1)
        }
    }

    /// Owner-checked delete. Returns how many keys still held our token.
    pub(crate) async fn release(&self, keys: &[String], token: &str) -> RedisResult<usize> {
        let mut conn = self.connection().await?;
        scripts::eval(scripts::RELEASE, keys)
            .arg(token)
            .query_async(&mut conn)
            .await
    }

    /// Owner-checked ttl reset. Returns whether every key held our token.
    pub(crate) async fn extend(&self, keys: &[String], token: &str, ttl: Duration) -> RedisResult<bool> {
        let mut conn = self.connection().await?;
        let done: i64 = scripts::eval(scripts::EXTEND, keys)
            .arg(token)
            .arg(millis(ttl))
            .query_async(&mut conn)
            .await?;
        Ok(done == 1)
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
