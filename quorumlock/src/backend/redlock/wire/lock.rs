//! The lock on one node: acquire, release and extend, each owner-checked
//! where it acts on a key that may no longer be ours (renewals: `renew`).

use std::sync::Arc;

use redis::{Cmd, RedisResult, Value};

use super::fence::{FenceAsk, FenceRead};
use super::queue::{self, QueueEntry, announce_lua};
use super::reply::{count, integer, set_nx_granted};
use super::request::Request;
use super::script::script;
use super::{fence, keys};
use crate::wall_clock::unix_ms;

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
    /// Also proposes a token and reads the node's fence for the resources:
    /// a fenced acquisition ([`fence::FENCED_ACQUIRE`]).
    Fenced(FenceAsk),
    /// A waiter's attempt on one resource: where it is held, the waiter
    /// queues in the same call ([`queue::ACQUIRE_OR_QUEUE`]).
    Queued(Arc<QueueEntry>),
    /// Both, for a fenced waiter's attempt on one resource
    /// ([`queue::FENCED_ACQUIRE_OR_QUEUE`]).
    FencedQueued(FenceAsk, Arc<QueueEntry>),
}

impl AcquireMode {
    /// What a fenced acquire asks of the fences.
    pub(crate) fn fence(&self) -> Option<&FenceAsk> {
        match self {
            AcquireMode::Fenced(fence) | AcquireMode::FencedQueued(fence, _) => Some(fence),
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
    /// What the node's fences said, when fenced.
    pub(crate) fence: Option<FenceRead>,
}

/// The command an [`Acquire`] goes as, chosen once for building it and
/// parsing its reply.
enum Shape<'a> {
    SetNx,
    Script,
    Fenced(&'a FenceAsk),
    Queued(&'a QueueEntry),
    FencedQueued(&'a FenceAsk, &'a QueueEntry),
}

impl Acquire {
    /// The queueing modes queue one resource; a waiter on several registers
    /// with a request of its own and sends the plain or fenced acquire.
    fn shape(&self) -> Shape<'_> {
        match (&self.mode, &*self.keys) {
            (AcquireMode::FencedQueued(fence, entry), [_]) => Shape::FencedQueued(fence, entry),
            (AcquireMode::Fenced(fence) | AcquireMode::FencedQueued(fence, _), _) => Shape::Fenced(fence),
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
            Shape::Fenced(ask) => fence::acquire(&self.keys, ask, &self.token, self.ttl_ms),
            Shape::Queued(entry) => queue::acquire_or_queue(&self.keys[0], &self.token, self.ttl_ms, entry),
            Shape::FencedQueued(ask, entry) => {
                queue::fenced_acquire_or_queue(&self.keys[0], ask, &self.token, self.ttl_ms, entry)
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

    fn route_key(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
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

    fn route_key(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
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

    fn route_key(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
