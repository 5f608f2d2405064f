//! `TIME`: a node's wall clock, which its keys expire by.

use redis::{Cmd, RedisResult, Value};

use super::reply::unexpected;
use super::request::Request;

/// Reads the node's clock: `TIME`, replied as microseconds since the epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Time;

impl Request for Time {
    type Reply = u64;

    fn command(&self) -> Cmd {
        redis::cmd("TIME")
    }

    /// `TIME` replies with two bulk strings: seconds and microseconds.
    fn parse(&self, reply: Value) -> RedisResult<u64> {
        let reply = reply.extract_error()?;
        let parts: Option<Vec<u64>> = match &reply {
            Value::Array(items) if items.len() == 2 => items
                .iter()
                .map(|item| match item {
                    Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
                    _ => None,
                })
                .collect(),
            _ => None,
        };
        match parts.as_deref() {
            Some(&[secs, micros]) if micros < 1_000_000 => secs
                .checked_mul(1_000_000)
                .and_then(|us| us.checked_add(micros))
                .ok_or_else(|| unexpected("TIME", &reply)),
            _ => Err(unexpected("TIME", &reply)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn time_is_read_in_microseconds_and_nothing_else_is() {
        let reply = Value::Array(vec![bulk("1700000000"), bulk("123456")]);
        assert_eq!(Time.parse(reply).unwrap(), 1_700_000_000_123_456);
        assert!(Time.parse(Value::Int(5)).is_err());
        assert!(
            Time.parse(Value::Array(vec![bulk("1"), bulk("1000000")]))
                .is_err()
        );
        assert!(Time.parse(Value::Array(vec![bulk("x"), bulk("1")])).is_err());
    }
}
