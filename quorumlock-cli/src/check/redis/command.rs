//! Sending one command to a node under the check's time limit: what every
//! part of the check ([`super::node`], [`super::access`], [`super::keys`])
//! talks to a node with.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, FromRedisValue};
use tokio::time::timeout;

/// One command with the check's time limit.
pub(super) async fn query<T: FromRedisValue>(
    conn: &mut MultiplexedConnection,
    limit: Duration,
    cmd: redis::Cmd,
) -> redis::RedisResult<T> {
    match timeout(limit, cmd.query_async(conn)).await {
        Ok(result) => result,
        Err(_) => Err(no_reply(limit)),
    }
}

/// The error of a command that got no reply within `limit`.
pub(super) fn no_reply(limit: Duration) -> redis::RedisError {
    redis::RedisError::from((ErrorKind::Io, "no reply in time", format!("{limit:?}")))
}
