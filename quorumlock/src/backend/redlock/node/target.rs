//! Where a server's connections go: a fixed address, or the master that
//! the sentinels of a Sentinel-managed set name at the time of connecting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::{MultiplexedConnection, PubSub};
use redis::io::tcp::socket2::TcpKeepalive;
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{AsyncConnectionConfig, Client, ConnectionInfo, RedisResult};
use tokio::sync::Mutex;

#[cfg(feature = "sim")]
use super::dialed::Dialed;

use crate::config::{KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_RETRIES};

/// Where a server's connections go.
pub(crate) enum Target {
    /// One address for good.
    Fixed(Client),
    /// The master the sentinels name, asked on every new connection.
    Sentinel(SentinelMaster),
    /// One address, its connections opened by a simulator's dialer.
    #[cfg(feature = "sim")]
    Dialed(Dialed),
}

/// A Sentinel-managed master: the sentinels, the master's name and how to
/// reach the servers they name.
pub(crate) struct SentinelMaster {
    /// Caches a connection per sentinel: behind a lock, since a lookup needs
    /// it mutably.
    sentinels: Mutex<Sentinel>,
    master: String,
    servers: SentinelNodeConnectionInfo,
    /// How many times the sentinels named another address than the last
    /// (see [`Target::changes`]), and that last address.
    changes: AtomicU64,
    last: std::sync::Mutex<Option<String>>,
}

impl SentinelMaster {
    pub(crate) fn new(
        sentinels: Vec<ConnectionInfo>,
        master: String,
        servers: SentinelNodeConnectionInfo,
    ) -> RedisResult<Self> {
        Ok(SentinelMaster {
            sentinels: Mutex::new(Sentinel::build(sentinels)?),
            master,
            servers,
            changes: AtomicU64::new(0),
            last: std::sync::Mutex::new(None),
        })
    }

    /// The master's name as the sentinels know it.
    pub(crate) fn master(&self) -> &str {
        &self.master
    }
}

impl Target {
    /// A request connection to the server (see `Conn`). `timeout` bounds a
    /// Sentinel lookup and a dialer's connect; a TCP connect is bounded by
    /// `config`'s connection timeout, the same value.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<MultiplexedConnection> {
        #[cfg(feature = "sim")]
        if let Target::Dialed(dialed) = self {
            return dialed.multiplexed(timeout, config).await;
        }
        let client = self.client(timeout).await?;
        client.get_multiplexed_async_connection_with_config(config).await
    }

    /// A pub/sub connection to the server (`timeout` as for
    /// [`Target::connect`]; the caller bounds the TCP connect).
    pub(crate) async fn pubsub(&self, timeout: Duration) -> RedisResult<PubSub> {
        #[cfg(feature = "sim")]
        if let Target::Dialed(dialed) = self {
            return dialed.pubsub(timeout).await;
        }
        self.client(timeout).await?.get_async_pubsub().await
    }

    /// The client to open the next connection with: for a Sentinel-managed
    /// master, the server the sentinels name now, which the crate confirms
    /// calls itself master (`ROLE`) before it is returned. Bounded by
    /// `timeout`: a sentinel that never answers must not hold up the node's
    /// requests for longer than a connection attempt.
    pub(crate) async fn client(&self, timeout: Duration) -> RedisResult<Client> {
        match self {
            Target::Fixed(client) => Ok(client.clone()),
            #[cfg(feature = "sim")]
            Target::Dialed(dialed) => Ok(dialed.client.clone()),
            Target::Sentinel(set) => {
                // Type-erased: the crate's lookup is a deeply nested future,
                // and carried in every request's type it exceeds the
                // compiler's recursion limit for `Send` in the callers'
                // crates.
                let lookup: BoxFuture<'_, RedisResult<Client>> = Box::pin(async {
                    let mut sentinels = set.sentinels.lock().await;
                    sentinels.async_master_for(&set.master, Some(&set.servers)).await
                });
                let client = tokio::time::timeout(timeout, lookup).await.map_err(|_| {
                    redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "no sentinel named the master in time",
                        format!("{} after {timeout:?}", set.master),
                    ))
                })??;
                let address = client.get_connection_info().addr().to_string();
                let mut last = set.last.lock().unwrap_or_else(|e| e.into_inner());
                if last.as_deref() != Some(address.as_str()) {
                    if last.is_some() {
                        set.changes.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(master = set.master, %address, "sentinels name a new master");
                    }
                    *last = Some(address);
                }
                Ok(with_socket_options(client))
            }
        }
    }

    /// How many times the server behind this target changed (a failover):
    /// readings of the old server's clock say nothing of the new one's.
    pub(crate) fn changes(&self) -> u64 {
        match self {
            Target::Fixed(_) => 0,
            #[cfg(feature = "sim")]
            Target::Dialed(_) => 0,
            Target::Sentinel(set) => set.changes.load(Ordering::Relaxed),
        }
    }

    /// The address of the server connected to last, if any.
    pub(crate) fn last_address(&self) -> Option<String> {
        match self {
            Target::Fixed(client) => Some(client.get_connection_info().addr().to_string()),
            #[cfg(feature = "sim")]
            Target::Dialed(dialed) => Some(dialed.client.get_connection_info().addr().to_string()),
            Target::Sentinel(set) => set.last.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// `client` with the socket options of node connections (request and
/// pub/sub), on top of those it has.
///
/// - TCP keepalive ([`KEEPALIVE_IDLE`]), unless the client sets its own.
/// - `SO_LINGER` 0: closing sends a reset and discards what the socket has
///   not yet delivered. A node connection is closed only once nothing waits
///   for its replies (or it was retired, see [`Conn::replace_if_silent`]),
///   and later requests go on a new connection. With an orderly close the
///   kernel would keep retransmitting the old connection's last commands,
///   which could then reach the node after requests sent later on the new
///   one: the order [`Node`](super::Node) promises.
pub(crate) fn with_socket_options(client: Client) -> Client {
    let info = client.get_connection_info();
    let mut tcp = info.tcp_settings().clone();
    if tcp.keepalive().is_none() {
        let keepalive = TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_RETRIES);
        tcp = tcp.set_keepalive(keepalive);
    }
    let tcp = tcp.set_linger_time(Duration::ZERO);
    // Opening a connection info cannot fail; keep the client as given if it
    // ever did.
    Client::open(info.clone().set_tcp_settings(tcp)).unwrap_or(client)
}
