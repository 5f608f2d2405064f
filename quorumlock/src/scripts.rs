//! The Lua scripts. Each runs atomically on one node (Redis executes a script
//! without interleaving other commands), which is what makes the owner check
//! and the action that follows it one indivisible step.
//!
//! They are sent with `EVALSHA`, and loaded (`SCRIPT LOAD`) on every new
//! connection before any request is handed to it (`crate::node::Conn`,
//! under the node's fair lock). A node's script cache lives as long as the
//! server process, and a server that restarted is reached through a new
//! connection, so every request finds its script loaded. The usual
//! alternative, `EVALSHA` with a reload on `NOSCRIPT` (`redis::Script`), is
//! unsafe here: the reload is a second and third command, sent only if the
//! caller keeps polling. The quorum layer stops polling a node once the
//! outcome is certain or its timeout passed, so on a node that had just
//! restarted an extend or release would silently never run, and a release
//! could even overtake the acquire it was meant to undo. Only a `SCRIPT
//! FLUSH` on a live server can still make a request fail with `NOSCRIPT`
//! (the command did not run); the connection is then dropped, so that the
//! next request reconnects and loads the scripts again.
//!
//! `EVALSHA` instead of `EVAL` saves the client sending, and the node
//! receiving and hashing, the script text (up to 1.5 KB) on every call.
//!
//! # Bounded work
//!
//! Redis serves no one else while a script runs, so every call here does a
//! bounded amount of work, whatever the data on the node: a script that
//! loops over a caller-sized or node-sized collection would stall every
//! client of the node for as long as it runs. Each script's docs name the
//! bound it relies on:
//! - per-lock scripts loop over one lock's keys: at most [`MAX_LOCK_KEYS`];
//! - the batch scripts over at most [`BATCH_MAX`](crate::batch::BATCH_MAX)
//!   requests of one key each;
//! - renewal over at most [`RENEW_CHUNK_KEYS`](crate::node::RENEW_CHUNK_KEYS)
//!   keys per call (the watchdog's locks are split across calls);
//! - the hand-off queues, which anyone may fill, are read at most
//!   [`ANNOUNCE_SCAN`] entries per release and [`ANNOUNCE_BUDGET`] per call.

use std::sync::LazyLock;

use redis::Cmd;

/// The most resources (keys) one lock may have: bounds the work of every
/// per-lock script ([`ACQUIRE`], [`RELEASE`], [`EXTEND`], [`FENCED_ACQUIRE`],
/// [`PROPOSE`], [`REGISTER`], [`UNREGISTER`]), each of which touches every
/// key of its lock a constant number of times, and keeps one lock within a
/// renewal call ([`RENEW_CHUNK_KEYS`](crate::node::RENEW_CHUNK_KEYS)).
/// Sixty-four keys keep each of them in the tens of microseconds. The
/// client's per-lock resource limit must not exceed it.
pub(crate) const MAX_LOCK_KEYS: usize = 64;

/// A lock script: its source and SHA1, by which it is called.
pub(crate) struct Script {
    pub(crate) source: &'static str,
    sha: LazyLock<String>,
}

impl Script {
    const fn new(source: &'static str, hash: fn() -> String) -> Script {
        Script {
            source,
            sha: LazyLock::new(hash),
        }
    }

    /// An `EVALSHA` of this script; append the keys and `ARGV` values.
    pub(crate) fn call(&self) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&*self.sha);
        cmd
    }

    /// An `EVALSHA` of this script over `keys`; append the `ARGV` values
    /// with `arg`.
    pub(crate) fn eval(&self, keys: &[String]) -> Cmd {
        let mut cmd = self.call();
        cmd.arg(keys.len()).arg(keys);
        cmd
    }
}

/// Declares a [`Script`] static from a source expression.
macro_rules! script {
    ($(#[$doc:meta])* $name:ident = $source:expr;) => {
        $(#[$doc])*
        pub(crate) static $name: Script = Script::new($source, || {
            redis::Script::new($source).get_hash().to_owned()
        });
    };
}

/// `SCRIPT LOAD` of every script a node connection must have loaded (all
/// but [`FENCED_WRITE`], which runs on the caller's own data store), as one
/// pipeline.
pub(crate) fn load_all() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for script in all() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(script.source);
    }
    pipe
}

fn all() -> [&'static Script; 13] {
    [
        &ACQUIRE,
        &RELEASE,
        &EXTEND,
        &RENEW,
        &CLAIM,
        &STORE,
        &FENCED_ACQUIRE,
        &PROPOSE,
        &BATCH,
        &BATCH_IN_ORDER,
        &REGISTER,
        &UNREGISTER,
        &ACQUIRE_OR_QUEUE,
    ]
}

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
/// script call: a batch announces up to [`BATCH_MAX`](crate::batch::BATCH_MAX)
/// releases and a multi-resource release up to [`MAX_LOCK_KEYS`], and
/// [`ANNOUNCE_SCAN`] entries for each would let one call examine thousands.
/// Past the budget each release still pops its head (so a live head is still
/// named); only the skip past expired heads stops.
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

/// The Lua function `announce(key, token, now_ms)` that [`RELEASE`] and
/// [`BATCH`] call after deleting a lock key: it wakes the next waiter (see
/// `crate::handoff`).
///
/// Waiters queue per resource in the sorted set `quorumlock:waiters:<key>`
/// (see [`REGISTER`]), ordered by the time they started waiting; a member is
/// `<deadline in unix ms>:<client id>:<waiter id>`. The release pops the
/// head, skipping entries whose deadline passed (their waiter gave up or
/// died) by the releasing client's clock `now_ms` (the clocks of the waiter
/// and the releaser may differ by up to the queue margin of
/// `crate::handoff`; the client's clock saves a `TIME` call on every
/// release), and publishes `<token> <member>` on the channel of the waiter's
/// client, `quorumlock:wake:<client id>`: one message per release, heard
/// only by the client of the one waiter that is to retry. With no one queued
/// it publishes nothing: a waiter queues (or takes the lock) on a node before
/// it relies on messages from it, so a message could only wake a waiter
/// whose own attempt is still to come and will find the key free; this
/// saves the uncontended release a `PUBLISH`. The popped waiter re-registers
/// (same place) if someone else got the lock first. Everything here is best
/// effort (`pcall`): a user without channel permission, or a foreign key of
/// another type under the queue's name, still releases, and waiters fall
/// back to polling. An entry not of this form is dropped like an expired
/// one.
///
/// Bounded work: the usual live head costs one `ZPOPMIN`. An expired head
/// costs one `ZRANGE` over at most [`ANNOUNCE_SCAN`] - 1 entries behind it
/// (within the call's [`ANNOUNCE_BUDGET`]) and one `ZREMRANGEBYRANK` of the
/// expired ones and the live waiter found among them. When all of them had
/// expired, nobody is named: the live waiters behind them poll, and later
/// releases keep clearing the way.
///
/// The queue key is not declared in `KEYS`: the nodes are independent
/// masters, not Redis Cluster members (see `crate::batch`).
macro_rules! announce_lua {
    () => {
        concat!(
            announce_limits!(),
            r"
local function live(member, now_ms)
  local deadline, client = string.match(member, '^(%d+):(%x+):')
  if client and tonumber(deadline) >= now_ms then return client end
end
local function announce(key, token, now_ms)
  local queue = 'quorumlock:waiters:' .. key
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

/// The Lua function `acquire(key, token, ttl_ms)` of the batch scripts: one
/// `SET NX PX`, as a status (`1` granted, `0` refused, `-1` failed, e.g. out
/// of memory; that request fails alone).
macro_rules! acquire_lua {
    () => {
        r"
local function acquire(key, token, ttl_ms)
  local reply = redis.pcall('SET', key, token, 'NX', 'PX', ttl_ms)
  if reply == false then
    return 0
  elseif reply.err then
    return -1
  end
  return 1
end
"
    };
}

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
    /// KEYS: the resources' queue keys (`quorumlock:waiters:<key>`); ARGV: the
    /// waiter's place (unix µs when it started waiting: earlier is served
    /// first), its member (`<deadline in unix ms>:<waiter id>`) and the queue's
    /// ttl in ms (the waiter's remaining wait plus a margin), so that an
    /// abandoned queue expires. `ZADD NX`: a waiter that re-registers after a
    /// lost race keeps its original place. Returns how many queues it joined.
    /// Bounded: one `ZADD` (and at most two expiry calls) per queue key, at
    /// most [`MAX_LOCK_KEYS`]; each `O(log n)` in the queue's length.
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
    /// leaving included, and a node whose releases lag behind the others
    /// (so that it had not popped this waiter yet) is cleaned up by the
    /// waiter's own grant there.
    ///
    /// KEYS: the key, its queue key; ARGV: token, ttl in ms, the waiter's place,
    /// member and queue ttl in ms. Returns 1 when set, 0 when held (queued).
    /// Bounded: two keys, at most four calls, each `O(log n)` in the queue's
    /// length.
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
    /// Takes a waiter out of the resources' queues (it got the lock, gave up or
    /// was cancelled). KEYS: queue keys; ARGV: the member. Returns how many
    /// queues it left. Bounded: one `ZREM` per queue key, at most
    /// [`MAX_LOCK_KEYS`].
    UNREGISTER = r"
local n = 0
for _, queue in ipairs(KEYS) do
  local removed = redis.pcall('ZREM', queue, ARGV[1])
  if type(removed) == 'number' then n = n + removed end
end
return n
";
}

script! {
    /// Sets every key to the token with a ttl, or none of them when any key exists.
    ///
    /// Atomic so that a multi-resource lock is all-or-nothing on each node: two
    /// clients locking `[a, b]` and `[b, c]` can never each hold half. A
    /// single-resource lock uses a plain `SET NX PX` instead (same effect, cheaper).
    /// KEYS: resources; ARGV: token, ttl in ms. Returns 1 when set, 0 when held.
    /// Bounded: two calls per key, at most [`MAX_LOCK_KEYS`] keys.
    ACQUIRE = r"
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
";
}

script! {
    /// Deletes each key that still holds our token.
    ///
    /// Atomic so that no other owner can take the key between our `GET` and our
    /// `DEL`: a blind `DEL` from a holder whose lock expired would free someone
    /// else's lock. Each deletion is announced (see `announce_lua!`), so that
    /// the next waiter retries at once.
    /// KEYS: resources; ARGV: token, the client's clock in unix ms. Returns how
    /// many keys it deleted. Bounded: at most [`MAX_LOCK_KEYS`] keys, each a
    /// `GET`, a `DEL` and one announcement (at most [`ANNOUNCE_SCAN`] queue
    /// entries, [`ANNOUNCE_BUDGET`] for the whole call).
    RELEASE = concat!(
    announce_lua!(),
    r"
local n = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    announce(key, ARGV[1], tonumber(ARGV[2]))
    n = n + 1
  end
end
return n
"
);
}

script! {
    /// Resets the ttl of every key, only when all of them still hold our token.
    ///
    /// Atomic for the same reason as [`RELEASE`]: a blind `PEXPIRE` would extend
    /// another owner's lock. It never deletes: a failed extend leaves the lock to
    /// its remaining validity. KEYS: resources; ARGV: token, ttl in ms. Returns 1
    /// when extended, 0 when any key is missing or belongs to another owner.
    /// Bounded: two calls per key, at most [`MAX_LOCK_KEYS`] keys.
    EXTEND = r"
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) ~= ARGV[1] then return 0 end
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[2])
end
return 1
";
}

script! {
    /// Renews a batch of locks on one node, each owner-checked, with a status
    /// per lock: `1` extended, `2` re-created where missing ("healed"), `0`
    /// missing (not healed), `-1` held by another token (left untouched).
    ///
    /// One script per node per watchdog tick instead of one command per lock,
    /// so renewal costs O(nodes) round trips whatever the number of locks.
    /// Atomic per lock for the same reason as [`EXTEND`]; a key of the wrong
    /// type counts as another owner's and affects only its own lock.
    /// KEYS: every lock's keys in order; ARGV: heal flag (`1`/`0`), then per
    /// lock its number of keys, token and ttl in ms. Bounded: at most three
    /// calls per key, and the client sends at most
    /// [`RENEW_CHUNK_KEYS`](crate::node::RENEW_CHUNK_KEYS) keys per call.
    RENEW = r"
local heal = ARGV[1] == '1'
local out = {}
local k, a = 1, 2
while a <= #ARGV do
  local n, token, ttl = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2]
  local status = 1
  for i = k, k + n - 1 do
    local v = redis.pcall('GET', KEYS[i])
    if v == false then
      status = 0
    elseif v ~= token then
      status = -1
      break
    end
  end
  if status == 1 or (status == 0 and heal) then
    for i = k, k + n - 1 do
      if redis.call('PEXPIRE', KEYS[i], ttl) == 0 then
        redis.call('SET', KEYS[i], token, 'NX', 'PX', ttl)
      end
    end
    if status == 0 then status = 2 end
  end
  out[#out + 1] = status
  k, a = k + n, a + 3
end
return out
";
}

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
    /// Atomic for the same reason as [`RELEASE`]: only the marker's owner may
    /// write the outcome, and only while its marker is still there, so a caller
    /// whose marker expired (and whose key another caller may have claimed)
    /// never overwrites someone else's marker or result.
    /// KEYS: the key; ARGV: our marker, record, ttl in ms. Returns 1 when
    /// written, 0 when the key no longer holds our marker. Bounded: one key,
    /// two calls.
    STORE = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";
}

script! {
    /// Fenced acquire, phase 1: the acquire of [`ACQUIRE`] that also returns the
    /// node's fence value for the resources: the highest stored fence, floored
    /// by the node's clock in microseconds (so that values keep growing after a
    /// restart that lost the stored fences).
    ///
    /// Atomic so that the fence value read belongs to the same instant as the
    /// grant. KEYS: the n resources, then their n fence keys; ARGV: token, ttl in
    /// ms. Returns `{granted (1/0), fence}`. Bounded: three calls per resource,
    /// at most [`MAX_LOCK_KEYS`] resources.
    FENCED_ACQUIRE = r"
local n = #KEYS / 2
local now = redis.call('TIME')
local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
for i = n + 1, 2 * n do
  local stored = tonumber(redis.call('GET', KEYS[i]))
  if stored and stored > fence then fence = stored end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {0, fence} end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return {1, fence}
";
}

script! {
    /// Fenced acquire, phase 2: accepts the proposed token `T` only if every
    /// fence of the resources is below it, then raises them all to `T`.
    ///
    /// Atomic so that a node accepts each value at most once: two proposals of
    /// the same `T` can never both win a majority. KEYS: fence keys; ARGV: `T`,
    /// the fence's retention in ms (see `crate::fence::FENCE_RETENTION`).
    /// Returns `{1, T}` when accepted, `{0, highest fence}` when not. Bounded:
    /// two calls per fence key, at most [`MAX_LOCK_KEYS`].
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
/// `BADKEY`. Bounded: two keys, at most six calls.
pub(crate) const FENCED_WRITE: &str = r"
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

script! {
    /// A batch of single-key acquires (`SET NX PX`) and releases (the
    /// owner-checked delete and announcement of [`RELEASE`]) from concurrent
    /// requests, with one status per request: `1` granted / deleted, `0`
    /// refused / not ours, `-1` the key has the wrong type (that request fails
    /// alone; the others are unaffected).
    ///
    /// One script call for many requests saves the per-command overhead of the
    /// server and the client under load (see `crate::batch`). Each request is
    /// atomic on its own, as its one-command form is. The releases run first,
    /// which the client allows only when that keeps the outcome of the order
    /// in which the requests were made (no release follows another request on
    /// its key; else it sends [`BATCH_IN_ORDER`]). They run
    /// together, as one `MGET` for the owner checks, one `DEL` of the keys
    /// that are ours and one `EXISTS` over their queues (a queue is popped and
    /// announced only when some queue exists). Inside a script every
    /// `redis.call` costs about a microsecond of conversions on top of the
    /// command itself, more than `GET`, `DEL` or `ZPOPMIN` cost; three calls
    /// per batch instead of three per release is what makes a batch cheaper
    /// for the node than pipelined single commands. `MGET` answers nil for a
    /// key of another type, so a nil is told apart from a missing key by an
    /// `EXISTS` (a release of an expired lock, the rare case). The acquires
    /// follow, one `SET NX PX` each: Redis has no multi-key `SET` with a ttl.
    ///
    /// KEYS: the released keys, then the acquired keys; ARGV: the client's
    /// clock in unix ms (for [`RELEASE`]'s announcement), the number of
    /// releases, a token per release, then a token and a ttl in ms per
    /// acquire. Statuses come in the order of KEYS. Bounded: at most
    /// [`BATCH_MAX`](crate::batch::BATCH_MAX) keys, a constant number of
    /// calls per key plus one announcement per deleted key (at most
    /// [`ANNOUNCE_SCAN`] queue entries each, [`ANNOUNCE_BUDGET`] in all).
    BATCH = concat!(
    announce_lua!(),
    acquire_lua!(),
    r"
local now_ms = tonumber(ARGV[1])
local releases = tonumber(ARGV[2])
local out = {}
if releases > 0 then
  local values = redis.call('MGET', unpack(KEYS, 1, releases))
  local freed, tokens = {}, {}
  for i = 1, releases do
    local token = ARGV[2 + i]
    if values[i] == token then
      out[i] = 1
      freed[#freed + 1] = KEYS[i]
      tokens[#tokens + 1] = token
    elseif values[i] == false and redis.call('EXISTS', KEYS[i]) == 1 then
      out[i] = -1
    else
      out[i] = 0
    end
  end
  if #freed > 0 then
    redis.call('DEL', unpack(freed))
    local queues = {}
    for j = 1, #freed do
      queues[j] = 'quorumlock:waiters:' .. freed[j]
    end
    if redis.pcall('EXISTS', unpack(queues)) ~= 0 then
      for j = 1, #freed do
        announce(freed[j], tokens[j], now_ms)
      end
    end
  end
end
local a = 3 + releases
for i = releases + 1, #KEYS do
  out[i] = acquire(KEYS[i], ARGV[a], ARGV[a + 1])
  a = a + 2
end
return out
"
);
}

script! {
    /// [`BATCH`] for a batch in which a release follows another request on its
    /// key: the requests run one by one, in the order they were made (a
    /// release queued behind the acquire it undoes must see that key set), at
    /// the cost of two to three inner calls per release instead of three per
    /// batch. Same statuses as [`BATCH`]. KEYS: one key per request; ARGV: the
    /// client's clock in unix ms (for [`RELEASE`]'s announcement), then per
    /// request `a`, token, ttl in ms (acquire) or `r`, token (release).
    /// Bounded as [`BATCH`].
    BATCH_IN_ORDER = concat!(
    announce_lua!(),
    acquire_lua!(),
    r"
local out = {}
local now_ms = tonumber(ARGV[1])
local a = 2
for i, key in ipairs(KEYS) do
  if ARGV[a] == 'a' then
    out[i] = acquire(key, ARGV[a + 1], ARGV[a + 2])
    a = a + 3
  else
    local value = redis.pcall('GET', key)
    if type(value) == 'table' and value.err then
      out[i] = -1
    elseif value == ARGV[a + 1] then
      redis.call('DEL', key)
      announce(key, ARGV[a + 1], now_ms)
      out[i] = 1
    else
      out[i] = 0
    end
    a = a + 2
  end
end
return out
"
);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Lua copies of the announcement limits are the Rust constants.
    #[test]
    fn announce_limits_in_lua_match_the_constants() {
        let expected = format!("local announce_scan, announce_budget = {ANNOUNCE_SCAN}, {ANNOUNCE_BUDGET}\n");
        assert_eq!(announce_limits!(), expected);
        for script in [&RELEASE, &BATCH, &BATCH_IN_ORDER] {
            assert!(script.source.contains(&expected));
        }
    }
}
