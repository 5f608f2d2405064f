//! Reading replies: every reply of the wrong shape is an error of that node,
//! never a yes.

use std::time::Duration;

use redis::{ErrorKind, RedisError, RedisResult, Value};

/// A duration in whole milliseconds, the unit of `PX` and `PEXPIRE`
/// (the client rejects ttls below one millisecond).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A script's reply, which must be an integer: the scripts return Lua
/// numbers, which Redis sends as RESP integers. The redis crate would also
/// read a string such as "1" as a number, so a node answering out of step
/// with its requests could otherwise confirm an operation.
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

/// A script's reply that must be exactly two integers.
pub(crate) fn pair(what: &'static str, reply: Value) -> RedisResult<(i64, i64)> {
    match integers(what, reply)?[..] {
        [a, b] => Ok((a, b)),
        _ => Err(wrong_reply_count()),
    }
}

/// A non-negative count from a script.
pub(crate) fn count(what: &'static str, reply: Value) -> RedisResult<usize> {
    let n = integer(what, reply)?;
    usize::try_from(n).map_err(|_| unexpected(what, &Value::Int(n)))
}

/// `SET NX` answers `+OK` (set) or nil (the key exists). Any other reply does
/// not answer this request: a failed node, never a grant.
pub(crate) fn set_nx_granted(reply: Value) -> RedisResult<bool> {
    match reply.extract_error()? {
        Value::Okay => Ok(true),
        Value::SimpleString(s) if s == "OK" => Ok(true),
        Value::Nil => Ok(false),
        other => Err(unexpected("SET NX", &other)),
    }
}

/// The error for a reply the command never gives: a failed node.
pub(crate) fn unexpected(what: &'static str, reply: &Value) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "unexpected reply type",
        format!("{what} answered {reply:?}"),
    ))
}

/// A pipeline or script answered with a different number of replies than
/// it was asked for (a broken server or proxy).
pub(crate) fn wrong_reply_count() -> RedisError {
    RedisError::from((ErrorKind::Parse, "answered with the wrong number of replies"))
}
