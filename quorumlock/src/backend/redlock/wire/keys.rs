//! The names of the keys the library keeps besides the lock keys.
//!
//! A lock key is the resource name as given (the wire format shared with
//! other Redlock libraries). Everything else the library stores on a node
//! (fences, hand-off queues) lives under [`RESERVED_PREFIX`], and resource
//! names inside it are refused, so that no lock can overwrite or block one
//! of these keys and none of them can collide with a lock.
//!
//! Each derived key carries the resource's hash slot: in a Redis Cluster a
//! key's slot is the hash of its hash tag (the text between the first `{`
//! and the next `}`, when not empty) or else of the whole key, and a script
//! may only touch keys of one slot. So the derived key's tag is the
//! resource's own tag, or the whole resource name.

use std::fmt;

pub(crate) use crate::lock::resources::{RESERVED_PREFIX, is_reserved};

/// The key of `resource`'s fencing token on a lock node.
pub(crate) fn fence(resource: &str) -> String {
    derived("quorumlock:fence:", resource)
}

/// The key of the highest fencing token seen for `resource`, next to the
/// data a [`FencedWrite`](crate::FencedWrite) protects.
pub(crate) fn fence_seen(resource: &str) -> String {
    derived("quorumlock:fence-seen:", resource)
}

/// The key of the queue of waiters for `resource` (a sorted set).
pub(crate) fn queue(resource: &str) -> String {
    Queue(resource).to_string()
}

/// The queue key of a resource as a command argument, written straight
/// into the command (releases name one per key, on every lock's path).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queue<'a>(pub(crate) &'a str);

impl<'a> Queue<'a> {
    /// The key's text in pieces, to be written one after the other.
    fn parts(self) -> [&'a str; 5] {
        match semaphore_of(self.0) {
            Some(name) => ["quorumlock:waiters:{", name, "}:permits", "", ""],
            None => derived_parts("quorumlock:waiters:", self.0),
        }
    }
}

impl fmt::Display for Queue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.parts().iter().try_for_each(|part| f.write_str(part))
    }
}

/// The lock key of permit `index` of the semaphore `name`: `{name}:permit:<index>`.
///
/// The braces make the name the hash tag, so all permits of a semaphore, and
/// its queue, share a Redis Cluster hash slot. Every permit of a semaphore
/// has one queue of waiters ([`Queue`]): the release of any permit pops its
/// head, so each release wakes a different waiter, in the order they came,
/// and a waiter registers (and leaves) one entry, not one per permit. (A
/// plain lock on a key of this form is that permit, and waits in that line.)
pub(crate) fn permit(name: &str, index: usize) -> String {
    format!("{{{name}}}:permit:{index}")
}

/// The semaphore name of a permit's lock key ([`permit`]), if it is one:
/// `{name}:permit:<digits>` with no brace in `name`.
fn semaphore_of(key: &str) -> Option<&str> {
    let rest = key.strip_prefix('{')?;
    let close = rest.find('}')?;
    let (name, index) = (&rest[..close], rest[close + 1..].strip_prefix(":permit:")?);
    let digits = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
    (digits && !name.is_empty() && !name.contains('{')).then_some(name)
}

/// Written piece by piece, without the formatting machinery, which costs
/// more than the rest of a release's command (`docs/benchmarks.md`).
impl redis::ToRedisArgs for Queue<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let mut arg = out.writer_for_next_arg();
        for part in self.parts() {
            // Writing to the command's own buffer cannot fail.
            let _ = std::io::Write::write_all(&mut arg, part.as_bytes());
        }
    }
}

/// The pub/sub channel of the client with `id`: the releases that name one
/// of its waiters publish there. A channel, not a key: no hash slot.
pub(crate) fn wake_channel(id: &str) -> String {
    format!("{WAKE_PREFIX}{id}")
}

/// The prefix of every client's wake-up channel, as the release scripts
/// also write it.
pub(crate) const WAKE_PREFIX: &str = "quorumlock:wake:";

/// The prefix of the throwaway lock keys that `quorumlock check` tries a
/// node's permissions on: inside the reserved namespace, so that no lock
/// can be one of them, and with their queue keys ([`queue`]) where the
/// hand-off's queues live, under the permissions those need.
pub(crate) const PROBE_PREFIX: &str = "quorumlock:check:";

/// The wake-up channel that `quorumlock check` publishes on: a channel of
/// the wake-up prefix, which the user needs, whose client id no client has
/// (theirs are hex), so that no waiter hears the probe.
pub(crate) fn probe_channel(id: &str) -> String {
    wake_channel(&format!("check-{id}"))
}

/// `prefix` and `resource`, in `resource`'s hash slot.
///
/// With a hash tag `{t}` in the resource, the tag is repeated first:
/// `prefix{t}:resource`. Without one, the whole resource becomes the tag,
/// `prefix{resource}`, which hashes like the resource itself as long as it
/// has no `}`. A name with a `}` but no tag (`a}b`, `{}x`) hashes as a whole
/// and no tag reproduces that: its derived keys are `prefix` + resource, in
/// another slot, which only matters to Redis Cluster members.
fn derived(prefix: &str, resource: &str) -> String {
    derived_parts(prefix, resource).concat()
}

/// The key [`derived`] names, in pieces to be written one after the other.
fn derived_parts<'a>(prefix: &'a str, resource: &'a str) -> [&'a str; 5] {
    match hash_tag(resource) {
        Some(tag) => [prefix, "{", tag, "}:", resource],
        None if !resource.contains('}') => [prefix, "{", resource, "}", ""],
        None => [prefix, resource, "", "", ""],
    }
}

/// The number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of `key` in a Redis Cluster: the CRC16 (XMODEM) of its
/// hash tag, or of the whole key without one, modulo [`SLOTS`].
pub(crate) fn slot(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key).as_bytes()) % SLOTS
}

/// Whether every key derived from `resource` shares its hash slot (see
/// [`derived`]): not for a name with a `}` but no hash tag.
pub(crate) fn derives_in_slot(resource: &str) -> bool {
    hash_tag(resource).is_some() || !resource.contains('}')
}

/// The hash tag of `key` as Redis Cluster reads it: the text between the
/// first `{` and the first `}` after it, when not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text Redis Cluster hashes for `key`.
    fn hashed(key: &str) -> &str {
        hash_tag(key).unwrap_or(key)
    }

    #[test]
    fn derived_keys_hash_like_their_resource() {
        for resource in ["stock:42", "a{user:1}b", "{x}", "a{b", "x{y}z{w}", "}{x}"] {
            for key in [fence(resource), fence_seen(resource), queue(resource)] {
                assert_eq!(hashed(&key), hashed(resource), "{resource} -> {key}");
                assert!(is_reserved(&key), "{key}");
            }
        }
    }

    /// Figures from the Redis Cluster specification: `CLUSTER KEYSLOT`
    /// answers these, and CRC16 (XMODEM) of "123456789" is 0x31C3.
    #[test]
    fn slots_are_those_redis_cluster_computes() {
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("a{}b"), slot("a{}b"));
        for resource in ["stock:42", "a{user:1}b", "{x}", "a{b"] {
            assert!(derives_in_slot(resource));
            for key in [fence(resource), queue(resource)] {
                assert_eq!(slot(&key), slot(resource), "{resource} -> {key}");
            }
        }
        assert!(!derives_in_slot("a}b"));
    }

    #[test]
    fn a_name_with_a_brace_and_no_tag_still_gets_a_reserved_key() {
        for resource in ["a}b", "{}x"] {
            assert_eq!(fence(resource), format!("quorumlock:fence:{resource}"));
        }
    }

    #[test]
    fn a_queue_key_as_a_command_argument_is_its_text() {
        for resource in [
            "stock:42",
            "a{user:1}b",
            "a}b",
            "{pool}:permit:3",
            "{pool}:permit:x",
        ] {
            let args = redis::ToRedisArgs::to_redis_args(&Queue(resource));
            assert_eq!(args, [queue(resource).into_bytes()], "{resource}");
        }
    }

    #[test]
    fn derived_keys_are_distinct_per_resource() {
        let resources = ["a", "b", "a{b}", "{b}a", "a}b", "ab}"];
        let keys: std::collections::HashSet<String> = resources.iter().map(|r| fence(r)).collect();
        assert_eq!(keys.len(), resources.len());
    }

    #[test]
    fn the_permits_of_a_semaphore_share_one_queue_in_their_slot() {
        let pool: Vec<String> = (0..12).map(|i| permit("pool", i)).collect();
        assert_eq!(pool[3], "{pool}:permit:3");
        for key in &pool {
            assert_eq!(queue(key), "quorumlock:waiters:{pool}:permits");
            assert_eq!(slot(&queue(key)), slot(key));
        }
        for other in [
            "{pool}:permit:",
            "{pool}:permit:x",
            "{}:permit:1",
            "pool:permit:1",
            "{pool}:permits",
        ] {
            assert_eq!(queue(other), derived("quorumlock:waiters:", other), "{other}");
        }
    }

    #[test]
    fn only_the_prefix_is_reserved() {
        assert!(is_reserved("quorumlock:anything"));
        assert!(!is_reserved("quorumlocks"));
        assert!(!is_reserved("app:quorumlock:x"));
    }
}
