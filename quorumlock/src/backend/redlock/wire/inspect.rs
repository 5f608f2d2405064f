//! Operator requests on one lock key: read what it holds, or delete it
//! whatever it holds.

use redis::{Cmd, RedisResult, Value};

use super::queue::announce_lua;
use super::reply::{unexpected, wrong_reply_count};
use super::request::Request;
use super::script::script;
use crate::wall_clock::unix_ms;

script! {
    /// Reads a lock key and its hand-off queue in one step: the key's type,
    /// its value when it is a string, its remaining ttl and the number of
    /// entries in the queue.
    ///
    /// Atomic so that the value and the ttl belong to the same holder: read
    /// apart, a release and a new acquisition in between would pair one
    /// holder's token with the next one's ttl. A queue key of another type
    /// counts as empty: no waiter can queue there (the queue scripts'
    /// `ZADD` fails on it). KEYS: the key, its queue key. Returns the type
    /// name (`none`, `string`, `hash`, ...), the value (empty unless a
    /// string), the `PTTL` (-2 missing, -1 no ttl) and the queue's size.
    /// Bounded: two keys, at most five O(1) calls.
    INSPECT = r"
local kind = redis.call('TYPE', KEYS[1]).ok
local value = ''
if kind == 'string' then value = redis.call('GET', KEYS[1]) end
local ttl = redis.call('PTTL', KEYS[1])
local waiters = 0
if redis.call('TYPE', KEYS[2]).ok == 'zset' then waiters = redis.call('ZCARD', KEYS[2]) end
return {kind, value, ttl, waiters}
";
}

script! {
    /// Deletes a lock key whatever it holds, and reports what that was.
    ///
    /// Atomic so that the value reported is the one deleted: read apart, the
    /// key could change hands in between and the report name a holder whose
    /// lock was never touched. `UNLINK`, not `DEL`, so that a large value of
    /// another type is freed outside the script and the call stays short.
    /// The deletion is announced like a release's (see
    /// `queue::announce_lua!`), so that the next waiter retries at once.
    /// KEYS: the key, its queue key; ARGV: the client's clock in unix ms.
    /// Returns the type name it deleted (`none` when there was no key) and
    /// the value (empty unless a string). Bounded: two calls and one
    /// announcement (at most [`ANNOUNCE_SCAN`](super::queue::ANNOUNCE_SCAN)
    /// queue entries).
    FORCE_DELETE = concat!(
    announce_lua!(),
    r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {kind, ''} end
local value = ''
if kind == 'string' then value = redis.call('GET', KEYS[1]) end
redis.call('UNLINK', KEYS[1])
announce(KEYS[2], kind == 'string' and value or kind, tonumber(ARGV[1]))
return {kind, value}
"
);
}

/// What a lock key holds on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// No key.
    Nothing,
    /// A string: a lock's token, of this library or another.
    String(Vec<u8>),
    /// Another type (its `TYPE` name): other data under the lock's name.
    Other(String),
}

impl Content {
    fn from_reply(kind: Value, value: Value) -> RedisResult<Content> {
        let kind = String::from_utf8_lossy(&bytes("the type name", kind)?).into_owned();
        Ok(match kind.as_str() {
            "none" => Content::Nothing,
            "string" => Content::String(bytes("the value", value)?),
            _ => Content::Other(kind),
        })
    }
}

/// A lock key on one node, read in one step ([`INSPECT`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) content: Content,
    /// `PTTL`: milliseconds left, -1 for no ttl, -2 for no key.
    pub(crate) pttl: i64,
    /// Entries in the key's hand-off queue.
    pub(crate) waiters: u64,
}

/// [`INSPECT`] of `key` and its queue key `queue`.
#[derive(Debug)]
pub(crate) struct Inspect {
    pub(crate) key: String,
    pub(crate) queue: String,
}

impl Request for Inspect {
    type Reply = Facts;

    fn command(&self) -> Cmd {
        INSPECT.call(2, (&self.key, &self.queue))
    }

    fn parse(&self, reply: Value) -> RedisResult<Facts> {
        let [kind, value, pttl, waiters] = items::<4>("the inspect script", reply)?;
        let waiters = number("the inspect script", waiters)?;
        Ok(Facts {
            content: Content::from_reply(kind, value)?,
            pttl: number("the inspect script", pttl)?,
            waiters: u64::try_from(waiters)
                .map_err(|_| unexpected("the inspect script", &Value::Int(waiters)))?,
        })
    }

    fn route_key(&self) -> Option<&str> {
        Some(&self.key)
    }
}

/// [`FORCE_DELETE`] of `key`, announced on its queue key `queue`. Replies
/// what it deleted ([`Content::Nothing`]: there was no key).
#[derive(Debug)]
pub(crate) struct ForceDelete {
    pub(crate) key: String,
    pub(crate) queue: String,
}

impl Request for ForceDelete {
    type Reply = Content;

    fn command(&self) -> Cmd {
        let mut cmd = FORCE_DELETE.call(2, (&self.key, &self.queue));
        cmd.arg(unix_ms());
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<Content> {
        let [kind, value] = items::<2>("the force delete script", reply)?;
        Content::from_reply(kind, value)
    }

    fn route_key(&self) -> Option<&str> {
        Some(&self.key)
    }
}

/// A script's reply that must be an array of exactly `N` items.
fn items<const N: usize>(what: &'static str, reply: Value) -> RedisResult<[Value; N]> {
    match reply.extract_error()? {
        Value::Array(items) => <[Value; N]>::try_from(items).map_err(|_| wrong_reply_count()),
        other => Err(unexpected(what, &other)),
    }
}

/// An integer item of a script's reply (not a string that reads as one:
/// see `reply::integer`).
fn number(what: &'static str, item: Value) -> RedisResult<i64> {
    match item {
        Value::Int(n) => Ok(n),
        other => Err(unexpected(what, &other)),
    }
}

/// A string item of a script's reply (Lua strings come as bulk strings).
fn bytes(what: &'static str, item: Value) -> RedisResult<Vec<u8>> {
    match item {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        other => Err(unexpected(what, &other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn an_inspect_reply_reads_as_its_facts() {
        let inspect = Inspect {
            key: "k".into(),
            queue: "q".into(),
        };
        let reply = Value::Array(vec![bulk("string"), bulk("tok"), Value::Int(900), Value::Int(2)]);
        assert_eq!(
            inspect.parse(reply).expect("a valid reply"),
            Facts {
                content: Content::String(b"tok".to_vec()),
                pttl: 900,
                waiters: 2
            }
        );
        let reply = Value::Array(vec![bulk("hash"), bulk(""), Value::Int(-1), Value::Int(0)]);
        assert_eq!(
            inspect.parse(reply).expect("valid").content,
            Content::Other("hash".into())
        );
    }

    #[test]
    fn replies_of_the_wrong_shape_are_errors() {
        let inspect = Inspect {
            key: "k".into(),
            queue: "q".into(),
        };
        // A ttl sent as a string, a short array, a plain integer: never facts.
        let stringly = Value::Array(vec![bulk("none"), bulk(""), bulk("-2"), Value::Int(0)]);
        assert!(inspect.parse(stringly).is_err());
        assert!(inspect.parse(Value::Array(vec![bulk("none")])).is_err());
        assert!(inspect.parse(Value::Int(1)).is_err());
        let force = ForceDelete {
            key: "k".into(),
            queue: "q".into(),
        };
        assert!(force.parse(Value::Nil).is_err());
        assert_eq!(
            force
                .parse(Value::Array(vec![bulk("none"), bulk("")]))
                .expect("valid"),
            Content::Nothing
        );
    }
}
