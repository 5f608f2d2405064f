//! The watchdog's renewals on the wire: many locks renewed in one script
//! call, each owner-checked, with a status per lock.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

use super::keys;
use super::reply::{integers, millis, unexpected, wrong_reply_count};
use super::request::Request;
use super::script::script;

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
    /// which the per-lock limit rules out, goes alone). With `one_slot`
    /// (a Redis Cluster member among the nodes), a run also holds only
    /// locks of one hash slot, since a script may touch one slot only; the
    /// locks keep their order either way. With `heal`, missing keys are
    /// re-created.
    pub(crate) fn chunks(items: &Arc<[RenewItem]>, heal: bool, one_slot: bool) -> Vec<Renew> {
        let slot = |item: &RenewItem| item.keys.first().map(|key| keys::slot(key));
        let mut calls = Vec::new();
        let mut start = 0;
        while start < items.len() {
            let first = slot(&items[start]);
            let mut keys = 0;
            let len = items[start..]
                .iter()
                .take_while(|item| {
                    keys += item.keys.len();
                    keys <= RENEW_CHUNK_KEYS && (!one_slot || slot(item) == first)
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

    /// The number of locks the call renews.
    pub(crate) fn len(&self) -> usize {
        self.range.len()
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

    fn route_key(&self) -> Option<&str> {
        self.items()
            .first()
            .and_then(|item| item.keys.first())
            .map(String::as_str)
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
        let chunks = Renew::chunks(&items, true, false);
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
        let per_call: Vec<usize> = Renew::chunks(&singles, true, false)
            .iter()
            .map(|c| c.range.len())
            .collect();
        assert_eq!(per_call, [512, 1]);
    }

    /// On a Redis Cluster member a call holds locks of one slot only, in
    /// their order.
    #[test]
    fn calls_for_a_cluster_member_keep_to_one_slot() {
        let names = ["{a}1", "{a}2", "b", "{a}3", "c", "c"];
        let items: Arc<[RenewItem]> = names
            .iter()
            .map(|name| RenewItem {
                keys: Arc::from([(*name).to_owned()]),
                token: Arc::from("t"),
                ttl: Duration::from_secs(1),
            })
            .collect();
        let per_call: Vec<usize> = Renew::chunks(&items, false, true)
            .iter()
            .map(|c| c.range.len())
            .collect();
        assert_eq!(per_call, [2, 1, 1, 2]);
        for call in Renew::chunks(&items, false, true) {
            let slots: std::collections::HashSet<u16> = call
                .items()
                .iter()
                .map(|item| keys::slot(&item.keys[0]))
                .collect();
            assert_eq!(slots.len(), 1);
        }
    }
}
