//! The lock on one node: acquire, release, extend and renew, each
//! owner-checked where it acts on a key that may no longer be ours.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

use super::queue::{self, QueueEntry, announce_lua};
use super::reply::{
    count, integer, integers, millis, set_nx_granted, unexpected, unix_ms, wrong_reply_count,
};
use super::request::Request;
use super::script::script;
use super::{fence, keys};

script! {
    /// Sets every key to the token with a ttl, or none of them when any key exists.
    ///
    /// Atomic so that a multi-resource lock is all-or-nothing on each node: two
    /// clients locking `[a, b]` and `[b, c]` can never each hold half. A
    /// single-resource lock uses a plain `SET NX PX` instead (same effect, cheaper).
    /// KEYS: resources; ARGV: token, ttl in ms. Returns 1 when set, 0 when held.
    /// Bounded: two calls per key, at most [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS) keys.
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
    /// else's lock. Each deletion whose queue exists is announced (see
    /// `queue::announce_lua!`), so that the next waiter retries at once. The
    /// `EXISTS` first: with no one waiting (the usual release) it costs the
    /// node less than the announcement's `ZPOPMIN`, whose empty reply becomes
    /// a table (measured with `bench/node-instructions.py`: docs/benchmarks.md).
    /// KEYS: the n resources, then their n queue keys; ARGV: token, the client's
    /// clock in unix ms. Returns how many keys it deleted. Bounded: at most
    /// [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS) keys, each a `GET`, a `DEL`, an
    /// `EXISTS` and one announcement (at most [`ANNOUNCE_SCAN`](queue::ANNOUNCE_SCAN)
    /// queue entries, [`ANNOUNCE_BUDGET`](queue::ANNOUNCE_BUDGET) for the whole call).
    RELEASE = concat!(
    announce_lua!(),
    r"
local n = #KEYS / 2
local deleted = 0
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    if redis.call('EXISTS', KEYS[n + i]) == 1 then
      announce(KEYS[n + i], ARGV[1], tonumber(ARGV[2]))
    end
    deleted = deleted + 1
  end
end
return deleted
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
    /// Bounded: two calls per key, at most [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS) keys.
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
    /// per lock (see [`RenewStatus`]): `1` extended, `2` re-created where
    /// missing ("healed"), `0` missing (not healed), `-1` held by another
    /// token (left untouched).
    ///
    /// One script per node per watchdog tick instead of one command per lock,
    /// so renewal costs O(nodes) round trips whatever the number of locks.
    /// Atomic per lock for the same reason as [`EXTEND`]; a key of the wrong
    /// type counts as another owner's and affects only its own lock.
    /// KEYS: every lock's keys in order; ARGV: heal flag (`1`/`0`), then per
    /// lock its number of keys, token and ttl in ms. Bounded: at most three
    /// calls per key, at most [`RENEW_CHUNK_KEYS`] keys per call.
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

/// Takes the lock's keys on one node.
#[derive(Debug)]
pub(crate) struct Acquire {
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl_ms: u64,
    pub(crate) mode: AcquireMode,
}

/// What else an acquire does on the node.
#[derive(Debug)]
pub(crate) enum AcquireMode {
    /// Nothing: `SET NX PX` (one key) or [`ACQUIRE`].
    Plain,
    /// Also reads the node's fence for the resources (these fence keys):
    /// phase 1 of a fenced acquisition ([`fence::FENCED_ACQUIRE`]).
    Fenced(Arc<[String]>),
    /// A waiter's attempt on one resource: where it is held, the waiter
    /// queues in the same call ([`queue::ACQUIRE_OR_QUEUE`]).
    Queued(Arc<QueueEntry>),
    /// Both, for a fenced waiter's attempt on one resource
    /// ([`queue::FENCED_ACQUIRE_OR_QUEUE`]).
    FencedQueued(Arc<[String]>, Arc<QueueEntry>),
}

impl AcquireMode {
    /// The fence keys a fenced acquire reads.
    pub(crate) fn fence_keys(&self) -> Option<&Arc<[String]>> {
        match self {
            AcquireMode::Fenced(fence_keys) | AcquireMode::FencedQueued(fence_keys, _) => Some(fence_keys),
            AcquireMode::Plain | AcquireMode::Queued(_) => None,
        }
    }
}

/// `SET key token NX PX ttl_ms`: a single-key lock, in the format every
/// Redlock library shares.
pub(crate) fn set_nx(key: &str, token: &str, ttl_ms: u64) -> Cmd {
    let mut cmd = super::script::command("SET");
    cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
    cmd
}

/// A node's answer to an [`Acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acquired {
    /// The node set every key to our token.
    pub(crate) granted: bool,
    /// The node's fence for the resources, when fenced.
    pub(crate) fence: Option<u64>,
}

/// The command an [`Acquire`] goes as, chosen once for building it and
/// parsing its reply.
enum Shape<'a> {
    SetNx,
    Script,
    Fenced(&'a [String]),
    Queued(&'a QueueEntry),
    FencedQueued(&'a str, &'a QueueEntry),
}

impl Acquire {
    /// The queueing modes queue one resource; a waiter on several registers
    /// with a request of its own and sends the plain or fenced acquire.
    fn shape(&self) -> Shape<'_> {
        match (&self.mode, &*self.keys) {
            (AcquireMode::FencedQueued(fence_keys, entry), [_]) => Shape::FencedQueued(&fence_keys[0], entry),
            (AcquireMode::Fenced(fence_keys) | AcquireMode::FencedQueued(fence_keys, _), _) => {
                Shape::Fenced(fence_keys)
            }
            (AcquireMode::Queued(entry), [_]) => Shape::Queued(entry),
            (_, [_]) => Shape::SetNx,
            _ => Shape::Script,
        }
    }
}

impl Request for Acquire {
    type Reply = Acquired;

    fn command(&self) -> Cmd {
        match self.shape() {
            Shape::SetNx => set_nx(&self.keys[0], &self.token, self.ttl_ms),
            Shape::Script => {
                let mut cmd = ACQUIRE.call(self.keys.len(), &*self.keys);
                cmd.arg(&*self.token).arg(self.ttl_ms);
                cmd
            }
            Shape::Fenced(fence_keys) => fence::acquire(&self.keys, fence_keys, &self.token, self.ttl_ms),
            Shape::Queued(entry) => queue::acquire_or_queue(&self.keys[0], &self.token, self.ttl_ms, entry),
            Shape::FencedQueued(fence_key, entry) => {
                queue::fenced_acquire_or_queue(&self.keys[0], fence_key, &self.token, self.ttl_ms, entry)
            }
        }
    }

    fn parse(&self, reply: Value) -> RedisResult<Acquired> {
        let (granted, fence) = match self.shape() {
            Shape::SetNx => (set_nx_granted(reply)?, None),
            Shape::Script => (integer("the acquire script", reply)? == 1, None),
            Shape::Fenced(_) | Shape::FencedQueued(..) => {
                let (granted, fence) = fence::acquired(reply)?;
                (granted, Some(fence))
            }
            Shape::Queued(_) => (queue::acquired_or_queued(reply)?, None),
        };
        Ok(Acquired { granted, fence })
    }

    fn writes_lock(&self) -> bool {
        true
    }
}

impl Acquire {
    /// Whether this is a plain single-key `SET NX PX` (which a node may
    /// send in a batch).
    pub(crate) fn is_set_nx(&self) -> bool {
        matches!(self.shape(), Shape::SetNx)
    }
}

/// Deletes the lock's keys on one node where they still hold our token, and
/// wakes the next waiter of each. Replies how many keys it deleted.
///
/// Its `KEYS` are the lock keys and then their hand-off queues
/// ([`keys::Queue`]), so that the announcement's key is declared too.
#[derive(Clone, Debug)]
pub(crate) struct Release {
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
}

impl Release {
    pub(crate) fn new(keys: Arc<[String]>, token: Arc<str>) -> Self {
        Release { keys, token }
    }

    /// The queue keys, in the order of the lock keys.
    pub(crate) fn queues(&self) -> impl Iterator<Item = keys::Queue<'_>> {
        self.keys.iter().map(|key| keys::Queue(key))
    }
}

impl Request for Release {
    type Reply = usize;

    fn command(&self) -> Cmd {
        let mut cmd = RELEASE.call(self.keys.len() * 2, &*self.keys);
        for queue in self.queues() {
            cmd.arg(queue);
        }
        cmd.arg(&*self.token).arg(unix_ms());
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<usize> {
        count("the release script", reply)
    }
}

/// Resets the ttl of the lock's keys on one node, if all still hold our
/// token. Replies whether they did.
#[derive(Debug)]
pub(crate) struct Extend {
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl_ms: u64,
}

impl Request for Extend {
    type Reply = bool;

    fn command(&self) -> Cmd {
        let mut cmd = EXTEND.call(self.keys.len(), &*self.keys);
        cmd.arg(&*self.token).arg(self.ttl_ms);
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        Ok(integer("the extend script", reply)? == 1)
    }

    fn writes_lock(&self) -> bool {
        true
    }
}

/// One lock in a renewal.
#[derive(Debug)]
pub(crate) struct RenewItem {
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
    pub(crate) ttl: Duration,
}

/// What renewal found for one lock on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenewStatus {
    /// Every key held our token; its ttl was reset.
    Extended,
    /// Some keys were missing and were re-created with our token.
    Healed,
    /// Some keys were missing (healing off).
    Missing,
    /// A key holds another token (or another type): left untouched.
    Foreign,
}

impl RenewStatus {
    /// Our token is on the node with the new ttl.
    pub(crate) fn confirmed(self) -> bool {
        matches!(self, RenewStatus::Extended | RenewStatus::Healed)
    }
}

/// Keys per renewal script call. Redis runs a script without serving
/// anything else; 512 keys keep one call well under a millisecond of server
/// time, and larger renewals are split into several calls sent back to back.
/// Counted in keys, not locks, because a lock may have up to
/// [`MAX_LOCK_KEYS`](super::MAX_LOCK_KEYS) resources; a lock is never split
/// across calls (its keys are renewed together or not at all), which the
/// assertion below keeps possible.
pub(crate) const RENEW_CHUNK_KEYS: usize = 512;

const _: () = assert!(RENEW_CHUNK_KEYS >= super::MAX_LOCK_KEYS);

/// One renewal script call: the locks `range` of `items`.
#[derive(Debug)]
pub(crate) struct Renew {
    items: Arc<[RenewItem]>,
    range: Range<usize>,
    heal: bool,
}

impl Renew {
    /// The calls that renew `items`: runs of whole locks with at most
    /// [`RENEW_CHUNK_KEYS`] keys each (a lock with more keys than that,
    /// which the per-lock limit rules out, goes alone). With `heal`,
    /// missing keys are re-created.
    pub(crate) fn chunks(items: &Arc<[RenewItem]>, heal: bool) -> Vec<Renew> {
        let mut calls = Vec::new();
        let mut start = 0;
        while start < items.len() {
            let mut keys = 0;
            let len = items[start..]
                .iter()
                .take_while(|item| {
                    keys += item.keys.len();
                    keys <= RENEW_CHUNK_KEYS
                })
                .count()
                .max(1);
            calls.push(Renew {
                items: Arc::clone(items),
                range: start..start + len,
                heal,
            });
            start += len;
        }
        calls
    }

    fn items(&self) -> &[RenewItem] {
        &self.items[self.range.clone()]
    }
}

impl Request for Renew {
    /// One status per lock of the call.
    type Reply = Vec<RenewStatus>;

    fn command(&self) -> Cmd {
        let keys: Vec<&String> = self.items().iter().flat_map(|item| item.keys.iter()).collect();
        let mut cmd = RENEW.call(keys.len(), keys);
        cmd.arg(if self.heal { "1" } else { "0" });
        for item in self.items() {
            cmd.arg(item.keys.len()).arg(&*item.token).arg(millis(item.ttl));
        }
        cmd
    }

    fn parse(&self, reply: Value) -> RedisResult<Vec<RenewStatus>> {
        let statuses = integers("the renewal script", reply)?;
        if statuses.len() != self.range.len() {
            return Err(wrong_reply_count());
        }
        statuses
            .into_iter()
            .map(|status| match status {
                1 => Ok(RenewStatus::Extended),
                2 => Ok(RenewStatus::Healed),
                0 => Ok(RenewStatus::Missing),
                -1 => Ok(RenewStatus::Foreign),
                other => Err(unexpected("the renewal script", &Value::Int(other))),
            })
            .collect()
    }

    fn writes_lock(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_of(keys: usize) -> RenewItem {
        RenewItem {
            keys: (0..keys).map(|i| format!("k{i}")).collect(),
            token: Arc::from("t"),
            ttl: Duration::from_secs(1),
        }
    }

    /// Renewal calls are bounded by keys, whatever the number of resources
    /// per lock, and never split a lock.
    #[test]
    fn renewal_chunks_count_keys_and_keep_locks_whole() {
        let sizes = [1, 64, 300, 200, 13, 512, 1, 600, 64];
        let items: Arc<[RenewItem]> = sizes.iter().map(|&n| lock_of(n)).collect();
        let chunks = Renew::chunks(&items, true);
        let total: usize = chunks.iter().map(|c| c.range.len()).sum();
        assert_eq!(total, items.len(), "every lock in exactly one call");
        for chunk in &chunks {
            let keys: usize = chunk.items().iter().map(|i| i.keys.len()).sum();
            assert!(
                keys <= RENEW_CHUNK_KEYS || chunk.range.len() == 1,
                "{keys} keys in a call of {} locks",
                chunk.range.len()
            );
        }
        let per_call: Vec<usize> = chunks.iter().map(|c| c.range.len()).collect();
        assert_eq!(per_call, [3, 2, 1, 1, 1, 1], "greedy runs of whole locks");
        // 512 single-key locks fit one call, the 513th starts the next.
        let singles: Arc<[RenewItem]> = (0..513).map(|_| lock_of(1)).collect();
        let per_call: Vec<usize> = Renew::chunks(&singles, true)
            .iter()
            .map(|c| c.range.len())
            .collect();
        assert_eq!(per_call, [512, 1]);
    }

    #[test]
    fn a_reply_of_the_wrong_shape_is_never_a_grant() {
        let acquire = Acquire {
            keys: Arc::from(["k".to_owned()]),
            token: Arc::from("t"),
            ttl_ms: 1000,
            mode: AcquireMode::Plain,
        };
        assert!(acquire.parse(Value::Okay).unwrap().granted);
        assert!(!acquire.parse(Value::Nil).unwrap().granted);
        for wrong in [
            Value::Int(1),
            Value::SimpleString("1".into()),
            Value::BulkString(b"OK".to_vec()),
        ] {
            assert!(acquire.parse(wrong).is_err());
        }
        let release = Release::new(Arc::from(["k".to_owned()]), Arc::from("t"));
        assert!(release.parse(Value::BulkString(b"1".to_vec())).is_err());
        assert_eq!(release.parse(Value::Int(1)).unwrap(), 1);
    }
}
