//! `WAIT numreplicas timeout`: how many replicas acknowledged the writes of
//! this connection.

use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

use super::reply::{integer, millis};

/// The `WAIT` that follows a lock write in replica-acknowledged mode.
pub(crate) fn wait(replicas: u32, timeout: Duration) -> Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(replicas).arg(millis(timeout));
    cmd
}

/// The number of replicas that acknowledged, from the reply to [`wait`].
pub(crate) fn acknowledged(reply: Value) -> RedisResult<i64> {
    integer("WAIT", reply)
}
