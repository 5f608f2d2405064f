//! The hand-off queues on a node: a waiter's place in line per resource,
//! and the wake-up a release publishes for the next waiter.
//!
//! Waiters queue per resource in a sorted set ([`keys::queue`]), ordered by
//! the time they started waiting; a member is `<deadline in unix ms>:<client
//! id>:<waiter id>`. A release that deletes a lock key pops the head of its
//! queue and publishes `<token> <member>` on the channel of that waiter's
//! client ([`keys::wake_channel`]): one message per release, heard only by
//! the client of the one waiter that is to retry.

use std::sync::Arc;

use redis::{Cmd, RedisResult, Value};

use super::fence::FenceAsk;
use super::keys;
use super::reply::{count, integer};
use super::request::Request;
use super::script::script;

/// Queue entries one announcement examines at most: the popped head and,
/// when that had expired, up to this many minus one behind it.
///
/// A release needs only the first live waiter, and one whose waiters keep
/// leaving the queue in time finds it at the head. Expired entries pile up
/// only when waiters die without leaving (or someone writes the queue key),
/// and an unbounded skip would then make one release a script that blocks
/// the node for as long as popping all of them takes (seconds for millions).
/// Sixteen is a few microseconds of script time; the entries left over are
/// popped by later releases, or vanish with the queue key's ttl.
pub(crate) const ANNOUNCE_SCAN: usize = 16;

/// Queue entries examined beyond each announcement's head, at most, per
/// script call: a batch announces up to [`BATCH_MAX`](super::batch::BATCH_MAX)
/// releases and a multi-resource release up to
/// [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS), and [`ANNOUNCE_SCAN`] entries for
/// each would let one call examine thousands. Past the budget each release
/// still pops its head (so a live head is still named); only the skip past
/// expired heads stops.
pub(crate) const ANNOUNCE_BUDGET: usize = 256;

// A scan must look past the head (else one expired head would stop every
// hand-off behind it), and the budget must hold at least one full scan.
const _: () = assert!(ANNOUNCE_SCAN >= 2 && ANNOUNCE_BUDGET >= ANNOUNCE_SCAN);

/// [`ANNOUNCE_SCAN`] and [`ANNOUNCE_BUDGET`] as Lua literals (`concat!`
/// takes no constants; a unit test keeps them equal).
macro_rules! announce_limits {
    () => {
        "local announce_scan, announce_budget = 16, 256\n"
    };
}
pub(crate) use announce_limits;

/// The Lua function `announce(queue, token, now_ms)` that the release
/// scripts call after deleting a lock key, with that key's queue (from
/// `KEYS`): it wakes the next waiter.
///
/// It pops the head, skipping entries whose deadline passed (their waiter
/// gave up or died) by the releasing client's clock `now_ms` (the clocks of
/// the waiter and the releaser may differ by up to the queue margin; the
/// client's clock saves a `TIME` call on every release), and publishes
/// `<token> <member>` on the channel of the waiter's client. With no one
/// queued it publishes nothing: a waiter queues (or takes the lock) on a node
/// before it relies on messages from it, so a message could only wake a
/// waiter whose own attempt is still to come and will find the key free.
/// Everything here is best effort (`pcall`): a user without channel
/// permission, or a foreign key of another type under the queue's name,
/// still releases, and waiters fall back to polling. An entry not of this
/// form is dropped like an expired one.
///
/// Bounded work: the usual live head costs one `ZPOPMIN`. An expired head
/// costs one `ZRANGE` over at most [`ANNOUNCE_SCAN`] - 1 entries behind it
/// (within the call's [`ANNOUNCE_BUDGET`]) and one `ZREMRANGEBYRANK`.
macro_rules! announce_lua {
    () => {
        concat!(
            $crate::backend::redlock::wire::queue::announce_limits!(),
            r"
local function live(member, now_ms)
  local deadline, client = string.match(member, '^(%d+):(%x+):')
  if client and tonumber(deadline) >= now_ms then return client end
end
local function announce(queue, token, now_ms)
  local head = redis.pcall('ZPOPMIN', queue)
  if type(head) ~= 'table' or not head[1] then return end
  local client = live(head[1], now_ms)
  if client then
    redis.pcall('PUBLISH', 'quorumlock:wake:' .. client, token .. ' ' .. head[1])
    return
  end
  local n = math.min(announce_scan - 1, announce_budget)
  if n < 1 then return end
  local behind = redis.call('ZRANGE', queue, 0, n - 1)
  announce_budget = announce_budget - #behind
  for i, member in ipairs(behind) do
    client = live(member, now_ms)
    if client then
      redis.call('ZREMRANGEBYRANK', queue, 0, i - 1)
      redis.pcall('PUBLISH', 'quorumlock:wake:' .. client, token .. ' ' .. member)
      return
    end
  end
  if #behind > 0 then redis.call('ZREMRANGEBYRANK', queue, 0, #behind - 1) end
end
"
        )
    };
}
pub(crate) use announce_lua;

/// The Lua function `stretch(queue, ttl_ms)`: makes a queue key live at least
/// `ttl_ms` more, never less than it already does. One `PEXPIRE GT` when the
/// queue already expires (the usual case: the newest waiter has the latest
/// deadline); a new queue has no expiry, which `GT` treats as infinite, and
/// servers before Redis 7.0 know no `GT`: then `PTTL` decides.
macro_rules! stretch_lua {
    () => {
        r"
local function stretch(queue, ttl_ms)
  if redis.pcall('PEXPIRE', queue, ttl_ms, 'GT') ~= 1
      and redis.call('PTTL', queue) < tonumber(ttl_ms) then
    redis.call('PEXPIRE', queue, ttl_ms)
  end
end
"
    };
}

script! {
    /// Queues a waiter for the resources, or keeps its place if it is queued.
    ///
    /// KEYS: the resources' queue keys; ARGV: the waiter's place (unix µs when
    /// it started waiting: earlier is served first), its member and the
    /// queue's ttl in ms (the waiter's remaining wait plus a margin), so that
    /// an abandoned queue expires. `ZADD NX`: a waiter that re-registers after
    /// a lost race keeps its original place. Returns how many queues it
    /// joined. Bounded: one `ZADD` (and at most two expiry calls) per queue
    /// key, at most [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS).
    REGISTER = concat!(
    stretch_lua!(),
    r"
local n = 0
for _, queue in ipairs(KEYS) do
  local added = redis.pcall('ZADD', queue, 'NX', ARGV[1], ARGV[2])
  if type(added) == 'number' then
    n = n + 1
    if added == 1 then stretch(queue, ARGV[3]) end
  end
end
return n
"
);
}

script! {
    /// A waiter's attempt: `SET NX PX` for one key; when set, the waiter leaves
    /// the key's queue on this node, and when the key is held, it keeps or
    /// takes its place in the queue (as [`REGISTER`] does), all in the same
    /// call: a waiter's attempts cost one command per node, queueing and
    /// leaving included, and a node whose releases lag behind the others is
    /// cleaned up by the waiter's own grant there.
    ///
    /// KEYS: the key, its queue key; ARGV: token, ttl in ms, the waiter's
    /// place, member and queue ttl in ms. Returns 1 when set, 0 when held
    /// (queued). Bounded: two keys, at most four calls.
    ACQUIRE_OR_QUEUE = concat!(
    stretch_lua!(),
    r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.pcall('ZREM', KEYS[2], ARGV[4])
  return 1
end
if redis.pcall('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[4]) == 1 then
  stretch(KEYS[2], ARGV[5])
end
return 0
"
);
}

script! {
    /// A fenced waiter's attempt: [`ACQUIRE_OR_QUEUE`] that also proposes a
    /// token and reads the node's fence for the resource, as a fenced
    /// acquire does ([`FENCED_ACQUIRE`](super::fence::FENCED_ACQUIRE)), so
    /// that fenced waiters queue and leave in their attempts as plain ones
    /// do.
    ///
    /// KEYS: the key, its fence key, its queue key; ARGV: token, ttl in ms,
    /// the waiter's place, member and queue ttl in ms, then the proposal's
    /// (token, retention in ms, µs ahead of the clock). Returns `{granted
    /// (1/0), fence, proposal taken (1/0), node clock in µs}`. Bounded: three
    /// keys, at most seven calls.
    FENCED_ACQUIRE_OR_QUEUE = concat!(
    super::fence::fence_lua!(),
    stretch_lua!(),
    r"
local fence, time = fence_floor(2, 2)
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.pcall('ZREM', KEYS[3], ARGV[4])
  if take_proposal(2, 2, fence, time, ARGV[6], ARGV[7], ARGV[8]) == 1 then
    return {1, tonumber(ARGV[6]), 1, time}
  end
  return {1, fence, 0, time}
end
if redis.pcall('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[4]) == 1 then
  stretch(KEYS[3], ARGV[5])
end
return {0, fence, 0, time}
"
);
}

script! {
    /// Takes a waiter out of the resources' queues (it got the lock, gave up or
    /// was cancelled). KEYS: queue keys; ARGV: the member. Returns how many
    /// queues it left. Bounded: one `ZREM` per queue key, at most
    /// [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS).
    UNREGISTER = r"
local n = 0
for _, queue in ipairs(KEYS) do
  local removed = redis.pcall('ZREM', queue, ARGV[1])
  if type(removed) == 'number' then n = n + removed end
end
return n
";
}

/// A waiter's entry in the queues of its resources.
#[derive(Clone, Debug)]
pub(crate) struct QueueEntry {
    /// The queue keys, one per resource ([`keys::queue`]).
    pub(crate) queues: Arc<[String]>,
    /// When the waiter started waiting (unix µs): its place in line.
    pub(crate) place: u64,
    /// `<deadline in unix ms>:<client id>:<waiter id>`.
    pub(crate) member: Arc<str>,
    /// The queue's ttl: the waiter's remaining wait plus a margin.
    pub(crate) ttl_ms: u128,
}

impl QueueEntry {
    /// The member for a waiter of client `client` whose entry expires at
    /// `deadline_ms` (unix ms).
    pub(crate) fn member(deadline_ms: u128, client: &str, waiter: u64) -> Arc<str> {
        format!("{deadline_ms}:{client}:{waiter:016x}").into()
    }
}

/// [`REGISTER`]: joins the queues, or keeps the old place. Replies how many
/// queues it is in.
#[derive(Debug)]
pub(crate) struct Register(pub(crate) QueueEntry);

impl Request for Register {
    type Reply = usize;

    fn command(&self) -> Cmd {
        let entry = &self.0;
        let mut cmd = REGISTER.call(entry.queues.len(), &*entry.queues);
        cmd.arg(entry.place)
            .arg(&*entry.member)
            .arg(entry.ttl_ms.to_string());
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<usize> {
        count("the queue registration script", reply)
    }

    fn route_key(&self) -> Option<&str> {
        self.0.queues.first().map(String::as_str)
    }
}

/// [`UNREGISTER`]: leaves the queues. Replies how many it left.
#[derive(Debug)]
pub(crate) struct Unregister {
    pub(crate) queues: Arc<[String]>,
    pub(crate) member: Arc<str>,
}

impl Request for Unregister {
    type Reply = usize;

    fn command(&self) -> Cmd {
        let mut cmd = UNREGISTER.call(self.queues.len(), &*self.queues);
        cmd.arg(&*self.member);
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<usize> {
        count("the queue removal script", reply)
    }

    fn route_key(&self) -> Option<&str> {
        self.queues.first().map(String::as_str)
    }
}

/// [`ACQUIRE_OR_QUEUE`] of `key` for the waiter of `entry`.
pub(crate) fn acquire_or_queue(key: &str, token: &str, ttl_ms: u64, entry: &QueueEntry) -> Cmd {
    let cmd = ACQUIRE_OR_QUEUE.call(2, (key, &entry.queues[0]));
    with_waiter_args(cmd, token, ttl_ms, entry)
}

/// [`FENCED_ACQUIRE_OR_QUEUE`] of `key` with the fence key of `fence`, for
/// the waiter of `entry`; its reply reads as [`super::fence::acquired`].
pub(crate) fn fenced_acquire_or_queue(
    key: &str,
    fence: &FenceAsk,
    token: &str,
    ttl_ms: u64,
    entry: &QueueEntry,
) -> Cmd {
    let cmd = FENCED_ACQUIRE_OR_QUEUE.call(3, (key, &fence.keys[0], &entry.queues[0]));
    super::fence::with_proposal(with_waiter_args(cmd, token, ttl_ms, entry), fence.proposal)
}

/// The `ARGV` the waiter's acquire scripts share: token, ttl in ms, then
/// the waiter's place, member and queue ttl in ms.
fn with_waiter_args(mut cmd: Cmd, token: &str, ttl_ms: u64, entry: &QueueEntry) -> Cmd {
    cmd.arg(token)
        .arg(ttl_ms)
        .arg(entry.place)
        .arg(&*entry.member)
        .arg(entry.ttl_ms.to_string());
    cmd
}

/// The reply to [`acquire_or_queue`]: set (`true`) or held and queued.
pub(crate) fn acquired_or_queued(reply: Value) -> RedisResult<bool> {
    Ok(integer("the acquire-or-queue script", reply)? == 1)
}

/// A wake-up message as a release publishes it: the releaser's token and
/// the member of the waiter it names, or `None` for a message of another
/// form.
pub(crate) fn wake_up(message: &[u8]) -> Option<(&[u8], &str)> {
    let at = message.iter().position(|&b| b == b' ')?;
    let member = std::str::from_utf8(&message[at + 1..]).ok()?;
    Some((&message[..at], member))
}

/// The client id in a wake-up channel's name, if it is one.
pub(crate) fn wake_client(channel: &str) -> Option<&str> {
    channel.strip_prefix(keys::WAKE_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Lua copies of the announcement limits are the Rust constants.
    #[test]
    fn announce_limits_in_lua_match_the_constants() {
        let expected = format!("local announce_scan, announce_budget = {ANNOUNCE_SCAN}, {ANNOUNCE_BUDGET}\n");
        assert_eq!(announce_limits!(), expected);
    }

    #[test]
    fn wake_up_messages_split_into_token_and_member() {
        assert_eq!(wake_up(b"tok 1:ab:cd"), Some((&b"tok"[..], "1:ab:cd")));
        assert_eq!(wake_up(b"no-space"), None);
        assert_eq!(wake_client("quorumlock:wake:abc"), Some("abc"));
        assert_eq!(wake_client("other"), None);
    }
}
