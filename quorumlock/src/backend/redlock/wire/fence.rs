//! Fencing on the wire: the fenced acquire (which proposes a token with its
//! grant and reads the node's fence), phase 2 ([`Propose`]) and the fenced
//! write to caller data.

use std::sync::Arc;

use redis::{Cmd, RedisResult, ToRedisArgs, Value};

use super::reply::{integers, millis, pair, wrong_reply_count};
use super::request::Request;
use super::script::script;
use crate::config::{FENCE_AHEAD, FENCE_RETENTION};

/// The Lua functions of a fenced acquire:
///
/// - `fence_floor(first, last)`: the node's fence for the fence keys
///   `KEYS[first..=last]`, the highest stored there, floored by the node's
///   clock in microseconds (so that values keep growing after a restart that
///   lost the stored fences), and that clock. One `TIME` and one `GET` per
///   key.
/// - `take_proposal(first, last, fence, time, proposal, retention, ahead)`:
///   raises those fence keys to `proposal` (kept `retention` ms) if it is
///   above `fence` and at most `ahead` µs past the node's clock `time`;
///   1 if it did. The bound keeps tokens near the node clocks, which the
///   time floor relies on ([`FENCE_AHEAD`](crate::config::FENCE_AHEAD)).
macro_rules! fence_lua {
    () => {
        r"
local function fence_floor(first, last)
  local now = redis.call('TIME')
  local time = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local fence = time
  for i = first, last do
    local stored = tonumber(redis.call('GET', KEYS[i]))
    if stored and stored > fence then fence = stored end
  end
  return fence, time
end
local function take_proposal(first, last, fence, time, proposal, retention, ahead)
  local proposed = tonumber(proposal)
  if proposed > fence and proposed <= time + tonumber(ahead) then
    for i = first, last do
      redis.call('SET', KEYS[i], proposal, 'PX', retention)
    end
    return 1
  end
  return 0
end
"
    };
}
pub(crate) use fence_lua;

script! {
    /// Fenced acquire: the acquire of [`ACQUIRE`](super::lock::ACQUIRE) (a
    /// single key with `SET NX PX`) that also proposes a token and reads the
    /// node's fence for the resources (`fence_lua!`).
    ///
    /// Where it grants, the node takes the proposed token as the resources'
    /// fence if it is above their fence floor and not too far ahead of the
    /// node's clock: a majority of such nodes makes it the lock's token in
    /// this one round trip. Atomic so that the proposal is taken only
    /// together with the grant: a node raises a fence only for the owner of
    /// the resources' keys (the argument is in `backend::redlock::fence`).
    /// KEYS: the n resources, then their n fence keys; ARGV: token, ttl in
    /// ms, the proposed token (0 proposes nothing), the fence's retention in
    /// ms, how far ahead of the node's clock it may be in µs. Returns
    /// `{granted (1/0), fence, proposal taken (1/0), node clock in µs}`, the
    /// fence being the proposal where it was taken. Bounded: three calls per
    /// resource, at most [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS) resources.
    FENCED_ACQUIRE = concat!(
    fence_lua!(),
    r"
local n = #KEYS / 2
local fence, time = fence_floor(n + 1, 2 * n)
if n == 1 then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0, fence, 0, time} end
else
  for i = 1, n do
    if redis.call('EXISTS', KEYS[i]) == 1 then return {0, fence, 0, time} end
  end
  for i = 1, n do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
end
if take_proposal(n + 1, 2 * n, fence, time, ARGV[3], ARGV[4], ARGV[5]) == 1 then
  return {1, tonumber(ARGV[3]), 1, time}
end
return {1, fence, 0, time}
"
);
}

script! {
    /// Fenced acquire, phase 2 (when the token proposed with the grant did
    /// not win a majority): accepts the proposed token `T` only while every
    /// lock key holds the proposer's lock token and every fence of the
    /// resources is below `T`, then raises them all to `T`.
    ///
    /// Atomic so that a node accepts each value at most once (two proposals
    /// of the same `T` can never both win a majority), and only from the
    /// owner of the keys, as the acquire takes its proposal. KEYS: the n
    /// resources, then their n fence keys; ARGV: `T`, the fence's retention
    /// in ms, the lock token. Returns `{1, T}` when accepted, `{0, highest
    /// fence}` when not. Bounded: three calls per resource, at most
    /// [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS).
    PROPOSE = r"
local n = #KEYS / 2
local proposed = tonumber(ARGV[1])
local highest = 0
for i = n + 1, 2 * n do
  local stored = tonumber(redis.call('GET', KEYS[i])) or 0
  if stored > highest then highest = stored end
end
if highest >= proposed then return {0, highest} end
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[3] then return {0, highest} end
end
for i = n + 1, 2 * n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, proposed}
";
}

/// The `ARGV` that propose a token with a fenced acquire: the token, the
/// fence's retention in ms, how far ahead of the node's clock it may be.
pub(crate) fn with_proposal(mut cmd: Cmd, proposal: u64) -> Cmd {
    cmd.arg(proposal)
        .arg(millis(FENCE_RETENTION))
        .arg(u64::try_from(FENCE_AHEAD.as_micros()).unwrap_or(u64::MAX));
    cmd
}

/// [`FENCED_ACQUIRE`] of `keys` with their fence keys, proposing
/// `fence.proposal`.
pub(crate) fn acquire(keys: &[String], fence: &FenceAsk, token: &str, ttl_ms: u64) -> Cmd {
    let mut cmd = FENCED_ACQUIRE.call(keys.len() * 2, (keys, &*fence.keys));
    cmd.arg(token).arg(ttl_ms);
    with_proposal(cmd, fence.proposal)
}

/// What a fenced acquire asks of the fences: their keys (one per resource)
/// and the token it proposes (0: none).
#[derive(Clone, Debug)]
pub(crate) struct FenceAsk {
    pub(crate) keys: Arc<[String]>,
    pub(crate) proposal: u64,
}

/// What a node's fences said to a fenced acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FenceRead {
    /// The node's fence for the resources after the call (the proposal
    /// where the node took it).
    pub(crate) floor: u64,
    /// The node granted and took the proposed token.
    pub(crate) took_proposal: bool,
    /// The node's clock (`TIME`) when it ran the call, unix µs.
    pub(crate) node_us: u64,
}

/// The reply to [`acquire`] (and to the waiter's fenced acquire): granted,
/// and what the fences said.
pub(crate) fn acquired(reply: Value) -> RedisResult<(bool, FenceRead)> {
    let what = "the fenced acquire script";
    match integers(what, reply)?[..] {
        [granted, floor, took, node_us] => Ok((
            granted == 1,
            FenceRead {
                floor: u64::try_from(floor).unwrap_or(0),
                took_proposal: granted == 1 && took == 1,
                node_us: u64::try_from(node_us).unwrap_or(0),
            },
        )),
        _ => Err(wrong_reply_count()),
    }
}

/// Phase 2 on one node: the owner of the lock `keys` (lock token
/// `owner`) proposes `token` for their fence keys, kept for `retention`
/// after it is accepted.
#[derive(Debug)]
pub(crate) struct Propose {
    pub(crate) keys: Arc<[String]>,
    pub(crate) owner: Arc<str>,
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
        let mut cmd = PROPOSE.call(self.keys.len() * 2, (&*self.keys, &*self.fence_keys));
        cmd.arg(self.token).arg(millis(self.retention)).arg(&*self.owner);
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
        self.keys.first().map(String::as_str)
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
