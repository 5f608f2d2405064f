//! Fencing on the wire: phase 1 (the fenced acquire, which reads the node's
//! fence), phase 2 ([`Propose`]) and the fenced write to caller data.

use std::sync::Arc;

use redis::{Cmd, RedisResult, ToRedisArgs, Value};

use super::reply::{millis, pair};
use super::request::Request;
use super::script::script;

/// The Lua function `fence_floor(first, last)`: the node's fence for the
/// fence keys `KEYS[first..=last]`, the highest stored there, floored by
/// the node's clock in microseconds (so that values keep growing after a
/// restart that lost the stored fences). One `TIME` and one `GET` per key.
macro_rules! fence_floor_lua {
    () => {
        r"
local function fence_floor(first, last)
  local now = redis.call('TIME')
  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  for i = first, last do
    local stored = tonumber(redis.call('GET', KEYS[i]))
    if stored and stored > fence then fence = stored end
  end
  return fence
end
"
    };
}
pub(crate) use fence_floor_lua;

script! {
    /// Fenced acquire, phase 1: the acquire of [`ACQUIRE`](super::lock::ACQUIRE)
    /// that also returns the node's fence value for the resources
    /// (`fence_floor_lua!`).
    ///
    /// Atomic so that the fence value read belongs to the same instant as the
    /// grant. KEYS: the n resources, then their n fence keys; ARGV: token, ttl in
    /// ms. Returns `{granted (1/0), fence}`. Bounded: three calls per resource,
    /// at most [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS) resources.
    FENCED_ACQUIRE = concat!(
    fence_floor_lua!(),
    r"
local n = #KEYS / 2
local fence = fence_floor(n + 1, 2 * n)
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {0, fence} end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, fence}
"
);
}

script! {
    /// Fenced acquire, phase 2: accepts the proposed token `T` only if every
    /// fence of the resources is below it, then raises them all to `T`.
    ///
    /// Atomic so that a node accepts each value at most once: two proposals of
    /// the same `T` can never both win a majority. KEYS: fence keys; ARGV: `T`,
    /// the fence's retention in ms. Returns `{1, T}` when accepted, `{0,
    /// highest fence}` when not. Bounded: two calls per fence key, at most
    /// [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS).
    PROPOSE = r"
local proposed = tonumber(ARGV[1])
local highest = 0
for _, key in ipairs(KEYS) do
  local stored = tonumber(redis.call('GET', key)) or 0
  if stored > highest then highest = stored end
end
if highest >= proposed then return {0, highest} end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return {1, proposed}
";
}

/// [`FENCED_ACQUIRE`] of `keys` with their `fence_keys`.
pub(crate) fn acquire(keys: &[String], fence_keys: &[String], token: &str, ttl_ms: u64) -> Cmd {
    let mut cmd = FENCED_ACQUIRE.call(keys.len() * 2, (keys, fence_keys));
    cmd.arg(token).arg(ttl_ms);
    cmd
}

/// The reply to [`acquire`]: granted, and the node's fence.
pub(crate) fn acquired(reply: Value) -> RedisResult<(bool, u64)> {
    let (granted, fence) = pair("the fenced acquire script", reply)?;
    Ok((granted == 1, u64::try_from(fence).unwrap_or(0)))
}

/// Phase 2 on one node: proposes `token` for the fence keys, kept for
/// `retention` after it is accepted.
#[derive(Debug)]
pub(crate) struct Propose {
    pub(crate) fence_keys: Arc<[String]>,
    pub(crate) token: u64,
    pub(crate) retention: std::time::Duration,
}

/// A node's answer to a [`Propose`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Proposed {
    pub(crate) accepted: bool,
    /// The node's highest fence for the resources after the call.
    pub(crate) highest: u64,
}

impl Request for Propose {
    type Reply = Proposed;

    fn command(&self) -> Cmd {
        let mut cmd = PROPOSE.call(self.fence_keys.len(), &*self.fence_keys);
        cmd.arg(self.token).arg(millis(self.retention));
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<Proposed> {
        let (accepted, highest) = pair("the fence proposal script", reply)?;
        Ok(Proposed {
            accepted: accepted == 1,
            highest: u64::try_from(highest).unwrap_or(0),
        })
    }

    fn route_key(&self) -> Option<&str> {
        self.fence_keys.first().map(String::as_str)
    }
}

/// A fenced write to caller data: applies the operation only when the
/// caller's token is at least the highest token seen for the resource, and
/// then records the token as seen.
///
/// Atomic so that the check and the write cannot be separated by a write of
/// a newer holder. Owner-free: it needs no lock, only the token. KEYS: the
/// "highest token seen" key, the data key; ARGV: token, operation (`set`
/// value | `incrby` delta min). Returns `{1, value}` when applied, `{-1,
/// seen}` when the token is stale, `{0, current}` when `incrby` would go
/// below `min`. A data key of the wrong kind is an error reply with code
/// `BADKEY`. Sent with `EVAL` (it runs on the caller's data store, which
/// never had it loaded). Bounded: two keys, at most six calls.
const FENCED_WRITE: &str = r"
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('BADKEY key ' .. KEYS[2] .. ' holds a ' .. kind .. ', not a string')
end
local token = tonumber(ARGV[1])
local seen = tonumber(redis.call('GET', KEYS[1])) or 0
if token < seen then return {-1, tostring(redis.call('GET', KEYS[1]))} end
if ARGV[2] == 'set' then
  redis.call('SET', KEYS[2], ARGV[3])
  redis.call('SET', KEYS[1], ARGV[1])
  return {1, ARGV[3]}
end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current == nil then
  return redis.error_reply('BADKEY key ' .. KEYS[2] .. ' does not hold an integer')
end
if current + tonumber(ARGV[3]) < tonumber(ARGV[4]) then return {0, tostring(current)} end
local value = redis.call('INCRBY', KEYS[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1])
return {1, tostring(value)}
";

fn fenced_write(seen_key: &str, key: &str, token: u64) -> Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(FENCED_WRITE).arg(2).arg(seen_key).arg(key).arg(token);
    cmd
}

/// The fenced write `SET key value`.
pub(crate) fn fenced_set<V: ToRedisArgs>(seen_key: &str, key: &str, token: u64, value: V) -> Cmd {
    let mut cmd = fenced_write(seen_key, key, token);
    cmd.arg("set").arg(value);
    cmd
}

/// The fenced write `INCRBY key delta`, only if the result stays at or
/// above `min`.
pub(crate) fn fenced_incr_by(seen_key: &str, key: &str, token: u64, delta: i64, min: i64) -> Cmd {
    let mut cmd = fenced_write(seen_key, key, token);
    cmd.arg("incrby").arg(delta).arg(min);
    cmd
}

/// What a fenced write did, with the text the script returned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FencedReply {
    /// Applied; the value written (the new value for `incrby`).
    Applied(String),
    /// Refused: a newer token was seen (the text is that token).
    Stale(String),
    /// `incrby` would go below its minimum (the text is the current value).
    BelowMin(String),
    /// The data key holds something the operation cannot apply to.
    BadKey(String),
}

/// The reply (or error) of a fenced write.
pub(crate) fn fenced_reply(reply: RedisResult<Value>) -> RedisResult<FencedReply> {
    let value = match reply.and_then(Value::extract_error) {
        Ok(value) => value,
        Err(e) if e.code() == Some("BADKEY") => {
            return Ok(FencedReply::BadKey(e.detail().unwrap_or_default().to_owned()));
        }
        Err(e) => return Err(e),
    };
    let (status, text): (i64, String) = redis::from_redis_value(value)?;
    Ok(match status {
        1 => FencedReply::Applied(text),
        -1 => FencedReply::Stale(text),
        _ => FencedReply::BelowMin(text),
    })
}
