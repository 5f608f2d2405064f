//! Idempotency keys on the wire: claim a key with an in-progress marker,
//! then replace the marker with the operation's record.

use std::sync::Arc;

use redis::{Cmd, RedisResult, Value};

use super::reply::{integer, unexpected};
use super::request::Request;
use super::script::script;

script! {
    /// Claims an idempotency key: sets our in-progress marker when the key is
    /// free, and otherwise returns what the key holds.
    ///
    /// Atomic so that the caller learns in one step either that it is now the
    /// owner or what stands in its way (another marker, a stored result), and so
    /// that a result written between a `GET` and a `SET NX` cannot be missed.
    /// KEYS: the key; ARGV: marker, ttl in ms. Returns nil when it set the marker,
    /// the current value otherwise. Bounded: one key, two calls.
    CLAIM = r"
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";
}

script! {
    /// Replaces our in-progress marker with a record (a result or a failure).
    ///
    /// Atomic for the same reason as [`RELEASE`](super::lock::RELEASE): only
    /// the marker's owner may write the outcome, and only while its marker is
    /// still there, so a caller whose marker expired (and whose key another
    /// caller may have claimed) never overwrites someone else's marker or
    /// result. KEYS: the key; ARGV: our marker, record, ttl in ms. Returns 1
    /// when written, 0 when the key no longer holds our marker. Bounded: one
    /// key, two calls.
    STORE = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";
}

/// Prefix of an in-progress marker; the owner's random token follows.
const PENDING: &str = "pending:";
/// Prefix of a stored result; the result's bytes follow.
const DONE: &[u8] = b"done:";
/// Prefix of a cached failure; the error message follows.
const FAILED: &[u8] = b"failed:";

/// An in-progress marker for the owner with `token`.
pub(crate) fn marker(token: &str) -> Arc<str> {
    format!("{PENDING}{token}").into()
}

/// The record of a successful operation's `output`.
pub(crate) fn done(output: &[u8]) -> Vec<u8> {
    [DONE, output].concat()
}

/// The record of a failed operation, with its error `message`.
pub(crate) fn failed(message: &str) -> Vec<u8> {
    [FAILED, message.as_bytes()].concat()
}

/// What an idempotency key holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// Another caller's in-progress marker.
    Pending,
    /// The stored result.
    Done(&'a [u8]),
    /// A cached failure's message.
    Failed(&'a [u8]),
    /// A value idempotency keys never write.
    Foreign,
}

impl<'a> Record<'a> {
    pub(crate) fn read(value: &'a [u8]) -> Self {
        if let Some(output) = value.strip_prefix(DONE) {
            Record::Done(output)
        } else if let Some(message) = value.strip_prefix(FAILED) {
            Record::Failed(message)
        } else if value.starts_with(PENDING.as_bytes()) {
            Record::Pending
        } else {
            Record::Foreign
        }
    }
}

/// [`CLAIM`]: replies `None` when our marker was set, else what the key
/// holds.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) key: Arc<[String]>,
    pub(crate) marker: Arc<str>,
    pub(crate) ttl_ms: u64,
}

impl Request for Claim {
    type Reply = Option<Vec<u8>>;

    fn command(&self) -> Cmd {
        let mut cmd = CLAIM.call(1, &self.key[0]);
        cmd.arg(&*self.marker).arg(self.ttl_ms);
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<Option<Vec<u8>>> {
        match reply.extract_error()? {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => Ok(Some(bytes)),
            other => Err(unexpected("the claim script", &other)),
        }
    }

    fn route_key(&self) -> Option<&str> {
        self.key.first().map(String::as_str)
    }
}

/// [`STORE`]: replies whether our marker was still there and was replaced.
#[derive(Debug)]
pub(crate) struct StoreRecord {
    pub(crate) key: Arc<[String]>,
    pub(crate) marker: Arc<str>,
    pub(crate) record: Arc<[u8]>,
    pub(crate) ttl_ms: u64,
}

impl Request for StoreRecord {
    type Reply = bool;

    fn command(&self) -> Cmd {
        let mut cmd = STORE.call(1, &self.key[0]);
        cmd.arg(&*self.marker).arg(&*self.record).arg(self.ttl_ms);
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        Ok(integer("the store script", reply)? == 1)
    }

    fn route_key(&self) -> Option<&str> {
        self.key.first().map(String::as_str)
    }
}
