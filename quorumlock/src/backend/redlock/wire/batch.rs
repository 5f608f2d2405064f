//! A node's batch on the wire: concurrent single-key acquires and releases
//! as one pipeline, its releases in one script call (the node layer decides
//! when to batch).
//!
//! One pipeline for many requests saves the client a write and a hand-over
//! per request under load, and one script call for many releases saves the
//! node the per-call cost of a script. Each request is atomic on its own,
//! as its one-command form is. Batches mix keys of any hash slot, so they
//! are for independent masters, not Redis Cluster members.

use std::sync::Arc;

use redis::{Cmd, Pipeline, RedisError, RedisResult, Value};

use super::keys;
use super::lock::{Acquire, Release, set_nx};
use super::queue::announce_lua;
use super::reply::{integers, set_nx_granted, wrong_reply_count};
use super::request::Request;
use super::script::script;
use crate::wall_clock::unix_ms;

/// Requests per batch. Redis serves nothing else while a script runs; 512
/// single-key releases take well under a millisecond.
pub(crate) const BATCH_MAX: usize = 512;

/// The Lua function `acquire(key, token, ttl_ms)` of [`BATCH_IN_ORDER`]:
/// one `SET NX PX`, as a status (`1` granted, `0` refused, `-1` failed, e.g. out
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

script! {
    /// The releases of a batch: the owner-checked delete and announcement of
    /// [`RELEASE`](super::lock::RELEASE) for each, with one status per
    /// release: `1` deleted, `0` not ours, `-1` the key has the wrong type
    /// (that release fails alone). The batch's acquires follow it in the
    /// same pipeline as top-level `SET NX PX` (see [`pipeline`]).
    ///
    /// The releases run together, as one `MGET` for the owner checks, one
    /// `DEL` of the keys that are ours and one `EXISTS` over their queues (a
    /// queue is popped and announced only when some queue exists). Inside a
    /// script every `redis.call` costs about a microsecond of conversions on
    /// top of the command itself, more than `GET`, `DEL` or `ZPOPMIN` cost;
    /// three calls per batch instead of three per release is what makes
    /// this cheaper for the node than one release script per request.
    /// `MGET` answers nil for a key of another type, so a nil is told apart
    /// from a missing key by an `EXISTS`.
    ///
    /// KEYS: the r released keys, then their r queue keys; ARGV: the
    /// client's clock in unix ms (for the announcement), then a token per
    /// release. Statuses in KEYS order. Bounded: at most [`BATCH_MAX`]
    /// releases, a constant number of calls per key plus one announcement
    /// per deleted key.
    BATCH = concat!(
    announce_lua!(),
    r"
local now_ms = tonumber(ARGV[1])
local releases = #KEYS / 2
local out = {}
local values = redis.call('MGET', unpack(KEYS, 1, releases))
local freed, tokens, queues = {}, {}, {}
for i = 1, releases do
  local token = ARGV[1 + i]
  if values[i] == token then
    out[i] = 1
    freed[#freed + 1] = KEYS[i]
    tokens[#tokens + 1] = token
    queues[#queues + 1] = KEYS[releases + i]
  elseif values[i] == false and redis.call('EXISTS', KEYS[i]) == 1 then
    out[i] = -1
  else
    out[i] = 0
  end
end
if #freed > 0 then
  redis.call('DEL', unpack(freed))
  if redis.pcall('EXISTS', unpack(queues)) ~= 0 then
    for j = 1, #freed do
      announce(queues[j], tokens[j], now_ms)
    end
  end
end
return out
"
);
}

script! {
    /// A batch in which a release follows another request on its key: the
    /// requests run one by one, in the order they were made (a release queued
    /// behind the acquire it undoes must see that key set), at the cost of
    /// two to three inner calls per release instead of three per batch, and
    /// a call per acquire. Statuses as [`BATCH`]'s, in request order (`1`
    /// also granted, `0` refused). KEYS: per request
    /// its key (acquire) or its key and queue key (release); ARGV: the
    /// client's clock in unix ms, then per request `a`, token, ttl in ms
    /// (acquire) or `r`, token (release). Bounded as [`BATCH`].
    BATCH_IN_ORDER = concat!(
    announce_lua!(),
    acquire_lua!(),
    r"
local out = {}
local now_ms = tonumber(ARGV[1])
local a, k = 2, 1
while a <= #ARGV do
  local key = KEYS[k]
  if ARGV[a] == 'a' then
    out[#out + 1] = acquire(key, ARGV[a + 1], ARGV[a + 2])
    a, k = a + 3, k + 1
  else
    local value = redis.pcall('GET', key)
    if type(value) == 'table' and value.err then
      out[#out + 1] = -1
    elseif value == ARGV[a + 1] then
      redis.call('DEL', key)
      announce(KEYS[k + 1], ARGV[a + 1], now_ms)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
    a, k = a + 2, k + 2
  end
end
return out
"
);
}

/// One batchable request: a single-key acquire or release.
#[derive(Debug)]
pub(crate) enum Op {
    /// `SET key token NX PX ttl` (`keys` has one key).
    Acquire {
        keys: Arc<[String]>,
        token: Arc<str>,
        ttl_ms: u64,
    },
    /// The owner-checked delete of one key, announced for waiters.
    Release(Release),
}

impl Op {
    /// `acquire` as a batch operation, when it is a plain single-key one.
    pub(crate) fn acquire(acquire: &Acquire) -> Option<Op> {
        acquire.is_set_nx().then(|| Op::Acquire {
            keys: Arc::clone(&acquire.keys),
            token: Arc::clone(&acquire.token),
            ttl_ms: acquire.ttl_ms,
        })
    }

    /// `release` as a batch operation, when it has one key.
    pub(crate) fn release(release: &Release) -> Option<Op> {
        (release.keys.len() == 1).then(|| Op::Release(release.clone()))
    }

    fn key(&self) -> &str {
        match self {
            Op::Acquire { keys, .. } => &keys[0],
            Op::Release(release) => &release.keys[0],
        }
    }

    fn is_release(&self) -> bool {
        matches!(self, Op::Release(_))
    }

    /// The request as its usual single command: `SET NX PX`, or the
    /// release script.
    pub(crate) fn command(&self) -> Cmd {
        match self {
            Op::Acquire { keys, token, ttl_ms } => set_nx(&keys[0], token, *ttl_ms),
            Op::Release(release) => release.command(),
        }
    }

    /// The outcome from the reply to [`Op::command`]: granted / deleted.
    pub(crate) fn parse(&self, reply: Value) -> RedisResult<bool> {
        match self {
            Op::Acquire { .. } => set_nx_granted(reply),
            Op::Release(release) => Ok(release.parse(reply)? > 0),
        }
    }
}

/// How the replies to a batch's [`pipeline`] map onto its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// One request, as its usual single command.
    Single,
    /// One [`BATCH_IN_ORDER`] call with a status per request.
    InOrder,
    /// The first `releases` requests in one [`BATCH`] call (none when
    /// `releases` is 0), then one `SET NX PX` reply per acquire.
    Grouped { releases: usize },
}

/// A batch of requests as one pipeline, and how to read its replies.
///
/// Where running every release first keeps the outcome of the order in
/// which the requests were made, `batch` is reordered releases first (its
/// order is then the order of the outcomes), the releases go as one
/// [`BATCH`] call and the acquires follow as top-level `SET NX PX`: an
/// acquire costs a node less as its own command in a pipeline than as a
/// call inside a script, which converts its arguments and its reply
/// (docs/benchmarks.md has the counts). Otherwise the batch is one
/// [`BATCH_IN_ORDER`] call.
pub(crate) fn pipeline<T>(batch: &mut [(Op, T)]) -> (Pipeline, Layout) {
    let mut pipe = redis::pipe();
    if let [(op, _)] = batch {
        pipe.add_command(op.command());
        return (pipe, Layout::Single);
    }
    if !releases_may_go_first(batch) {
        pipe.add_command(in_order(batch));
        return (pipe, Layout::InOrder);
    }
    // Stable: acquires of one key keep their order, and the outcomes are
    // matched by position.
    batch.sort_by_key(|(op, _)| !op.is_release());
    let releases = batch.partition_point(|(op, _)| op.is_release());
    if releases > 0 {
        let mut cmd = BATCH.begin(2 * releases);
        for (op, _) in &batch[..releases] {
            cmd.arg(op.key());
        }
        for (op, _) in &batch[..releases] {
            cmd.arg(keys::Queue(op.key()));
        }
        cmd.arg(unix_ms());
        for (op, _) in &batch[..releases] {
            if let Op::Release(release) = op {
                cmd.arg(&*release.token);
            }
        }
        pipe.add_command(cmd);
    }
    for (op, _) in &batch[releases..] {
        pipe.add_command(op.command());
    }
    (pipe, Layout::Grouped { releases })
}

/// Running every release of `batch` first, then every acquire in their
/// order, has the same outcome as running the requests in the order they
/// were made: no release follows another request on its key.
///
/// Requests on distinct keys commute, and moving a release ahead of acquires
/// of other keys changes nothing. A release may also move ahead of nothing on
/// its own key, so an acquire of `k` followed by the release of `k` (a release
/// queued behind its own acquire, on a node the quorum did not wait for) or
/// two releases of `k` keep their order. A release of `k` followed by an
/// acquire of `k` (a task that locks the same resource again while its last
/// release is still queued on a slow node: the usual repeated key) is already
/// in that order.
fn releases_may_go_first<T>(batch: &[(Op, T)]) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(batch.len());
    batch
        .iter()
        .all(|(op, _)| seen.insert(op.key()) || !op.is_release())
}

/// Several requests as one [`BATCH_IN_ORDER`] call.
fn in_order<T>(batch: &[(Op, T)]) -> Cmd {
    let releases = batch.iter().filter(|(op, _)| op.is_release()).count();
    let mut cmd = BATCH_IN_ORDER.begin(batch.len() + releases);
    for (op, _) in batch {
        cmd.arg(op.key());
        if op.is_release() {
            cmd.arg(keys::Queue(op.key()));
        }
    }
    cmd.arg(unix_ms());
    for (op, _) in batch {
        match op {
            Op::Acquire { token, ttl_ms, .. } => cmd.arg("a").arg(&**token).arg(ttl_ms),
            Op::Release(release) => cmd.arg("r").arg(&*release.token),
        };
    }
    cmd
}

/// The outcome of each request of `batch` (as [`pipeline`] left it, laid
/// out as `layout`) from the pipeline's `replies`: granted / deleted,
/// refused / not ours, or that request's own error.
pub(crate) fn outcomes<T>(
    batch: &[(Op, T)],
    layout: Layout,
    mut replies: Vec<Value>,
) -> RedisResult<Vec<RedisResult<bool>>> {
    let (script, acquires) = match layout {
        Layout::Single => {
            let ([(op, _)], Some(reply), None) = (batch, replies.pop(), replies.pop()) else {
                return Err(wrong_reply_count());
            };
            return Ok(vec![op.parse(reply)]);
        }
        Layout::InOrder => (batch.len(), 0),
        Layout::Grouped { releases } => (releases, batch.len() - releases),
    };
    if replies.len() != usize::from(script > 0) + acquires {
        return Err(wrong_reply_count());
    }
    let mut replies = replies.into_iter();
    let mut out = match (script, replies.next()) {
        (0, first) => first.into_iter().map(set_nx_granted).collect(),
        // A script that failed as a whole (`NOSCRIPT`, a busy node) fails
        // its own requests; the acquires after it ran, and keep theirs.
        (_, Some(reply)) => statuses(script, reply).unwrap_or_else(|error| vec![Err(error); script]),
        (_, None) => return Err(wrong_reply_count()),
    };
    out.extend(replies.map(set_nx_granted));
    Ok(out)
}

/// The statuses of a batch script's `len` requests.
fn statuses(len: usize, reply: Value) -> RedisResult<Vec<RedisResult<bool>>> {
    let statuses = integers("the batch script", reply)?;
    if statuses.len() != len {
        return Err(wrong_reply_count());
    }
    Ok(statuses
        .into_iter()
        .map(|status| match status {
            0 | 1 => Ok(status == 1),
            _ => Err(RedisError::from((
                redis::ErrorKind::Client,
                "the key holds a value of the wrong type",
            ))),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ops: &[(&str, &str)]) -> Vec<(Op, ())> {
        ops.iter()
            .map(|&(kind, key)| {
                let (token, keys) = (Arc::from("t"), Arc::from([key.to_owned()]));
                let op = match kind {
                    "a" => Op::Acquire {
                        keys,
                        token,
                        ttl_ms: 1,
                    },
                    _ => Op::Release(Release::new(keys, token)),
                };
                (op, ())
            })
            .collect()
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => panic!("not a plain argument: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn releases_go_first_only_where_that_keeps_the_outcome() {
        // Distinct keys commute; a release may also move ahead of its key's
        // later acquires, which it already precedes.
        for ops in [
            &[("a", "x"), ("r", "y"), ("a", "z")][..],
            &[("r", "x"), ("a", "x")],
            &[("a", "x"), ("a", "x"), ("r", "y")],
            &[("r", "x"), ("a", "x"), ("a", "x")],
        ] {
            assert!(releases_may_go_first(&batch(ops)), "{ops:?}");
        }
        // A release must not move ahead of an earlier request on its key.
        for ops in [
            &[("a", "x"), ("r", "x")][..],
            &[("r", "x"), ("r", "x")],
            &[("a", "y"), ("r", "x"), ("a", "x"), ("r", "x")],
        ] {
            assert!(!releases_may_go_first(&batch(ops)), "{ops:?}");
        }
    }

    fn commands(pipe: &Pipeline) -> Vec<Vec<String>> {
        pipe.cmd_iter().map(args).collect()
    }

    #[test]
    fn a_grouped_batch_sends_its_releases_in_one_call_then_each_acquire() {
        let mut ops = batch(&[("a", "k1"), ("r", "k2"), ("a", "k3"), ("r", "k4")]);
        let (pipe, layout) = pipeline(&mut ops);
        assert_eq!(layout, Layout::Grouped { releases: 2 });
        let keys: Vec<&str> = ops.iter().map(|(op, _)| op.key()).collect();
        assert_eq!(keys, ["k2", "k4", "k1", "k3"]);
        let commands = commands(&pipe);
        assert_eq!(commands.len(), 3);
        // EVALSHA sha numkeys keys... now tokens...
        assert_eq!(commands[0][0], "EVALSHA");
        assert_eq!(
            commands[0][2..7],
            [
                "4",
                "k2",
                "k4",
                "quorumlock:waiters:{k2}",
                "quorumlock:waiters:{k4}"
            ]
        );
        assert_eq!(commands[0][8..], ["t", "t"]);
        assert_eq!(commands[1], ["SET", "k1", "t", "NX", "PX", "1"]);
        assert_eq!(commands[2], ["SET", "k3", "t", "NX", "PX", "1"]);
    }

    #[test]
    fn outcomes_follow_the_layout_and_fail_alone() {
        let ops = batch(&[("r", "k2"), ("a", "k1"), ("a", "k3")]);
        let replies = vec![
            Value::Array(vec![Value::Int(1)]),
            Value::Nil,
            redis::parse_redis_value(b"-OOM command not allowed\r\n").unwrap(),
        ];
        let each = outcomes(&ops, Layout::Grouped { releases: 1 }, replies).unwrap();
        assert!(matches!(each[..], [Ok(true), Ok(false), Err(_)]));
        let too_few = outcomes_len(&ops, Layout::Grouped { releases: 1 }, vec![Value::Nil]);
        assert!(too_few.is_err());
        // The release call refused as a whole: its releases fail, the
        // acquires that ran after it keep their outcomes.
        let replies = vec![
            redis::parse_redis_value(b"-NOSCRIPT No matching script\r\n").unwrap(),
            Value::Okay,
            Value::Nil,
        ];
        let each = outcomes(&ops, Layout::Grouped { releases: 1 }, replies).unwrap();
        assert!(matches!(each[..], [Err(_), Ok(true), Ok(false)]));
        let acquires = batch(&[("a", "k1"), ("a", "k3")]);
        let granted = outcomes(
            &acquires,
            Layout::Grouped { releases: 0 },
            vec![Value::Okay, Value::Nil],
        );
        assert!(matches!(granted.unwrap()[..], [Ok(true), Ok(false)]));
    }

    fn outcomes_len(ops: &[(Op, ())], layout: Layout, replies: Vec<Value>) -> RedisResult<usize> {
        outcomes(ops, layout, replies).map(|o| o.len())
    }

    #[test]
    fn an_ordered_batch_gives_each_release_its_queue() {
        let mut ops = batch(&[("a", "x"), ("r", "x")]);
        let (pipe, layout) = pipeline(&mut ops);
        assert_eq!(layout, Layout::InOrder);
        let commands = commands(&pipe);
        assert_eq!(commands.len(), 1);
        let args = &commands[0];
        assert_eq!(args[2..6], ["3", "x", "x", "quorumlock:waiters:{x}"]);
        assert_eq!(args[7..], ["a", "t", "1", "r", "t"]);
    }
}
