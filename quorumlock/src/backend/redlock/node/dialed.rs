//! A server reached through a simulator's [`Dialer`] instead of TCP (the
//! `sim` feature; see `crate::sim`).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, RedisResult};

use crate::sim::{Dialer, Stream};

/// A server's address and the dialer that opens its connections.
pub(crate) struct Dialed {
    /// The URL's settings (database, credentials) and address.
    pub(crate) client: Client,
    pub(crate) dialer: Arc<dyn Dialer>,
}

impl Dialed {
    /// A request connection, its I/O driven by a task on the current
    /// runtime (as the crate's own connect does); connecting and the
    /// handshake bounded by `timeout`, as a TCP connect is.
    pub(crate) async fn multiplexed(
        &self,
        timeout: Duration,
        config: &AsyncConnectionConfig,
    ) -> RedisResult<MultiplexedConnection> {
        let info = self.client.get_connection_info().redis_settings();
        let open = async {
            let stream = self.stream().await?;
            MultiplexedConnection::new_with_config(info, stream, config.clone()).await
        };
        let (conn, driver) = within(timeout, open).await?;
        tokio::spawn(driver);
        Ok(conn)
    }

    /// A pub/sub connection, bounded by `timeout` as [`Dialed::multiplexed`].
    pub(crate) async fn pubsub(&self, timeout: Duration) -> RedisResult<PubSub> {
        let info = self.client.get_connection_info().redis_settings();
        within(timeout, async { PubSub::new(info, self.stream().await?).await }).await
    }

    async fn stream(&self) -> RedisResult<Stream> {
        let address = self.client.get_connection_info().addr().to_string();
        Ok(self.dialer.dial(&address).await?)
    }
}

/// `open`, or the error of a connect that took longer than `timeout`.
async fn within<T>(timeout: Duration, open: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
    tokio::time::timeout(timeout, open).await.map_err(|_| {
        RedisError::from((
            ErrorKind::Io,
            "connect timed out",
            format!("no connection within {timeout:?}"),
        ))
    })?
}
