//! A server probed as a primary of a Redis Cluster member: only the keys of
//! the hash slots it serves live there, and it must answer CLUSTER SLOTS.

use quorumlock::probe::MemberLayout;

/// A primary of a cluster member: the cluster as it answered, and the
/// primary's address (`host:port`) in it.
#[derive(Clone, Copy)]
pub(super) struct Shard<'a> {
    pub(super) layout: &'a MemberLayout,
    pub(super) address: &'a str,
}

impl Shard<'_> {
    /// Whether `key`'s hash slot is served by this primary.
    pub(super) fn serves(&self, key: &str) -> bool {
        self.layout.primary_of(key) == Some(self.address)
    }
}

/// Whether `key` lives on the server probed: every key does, but on a
/// primary of a cluster only the keys of its slots.
pub(super) fn holds(shard: Option<&Shard<'_>>, key: &str) -> bool {
    shard.is_none_or(|shard| shard.serves(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_holds_the_keys_of_its_slots_only() {
        // "a" hashes to slot 15495, "b" to 3300 (CRC16/XMODEM mod 16384).
        let layout = MemberLayout::Cluster {
            primaries: vec![
                ("h:1".to_owned(), vec![(0, 8191)]),
                ("h:2".to_owned(), vec![(8192, 16383)]),
            ],
        };
        let first = Shard {
            layout: &layout,
            address: "h:1",
        };
        let second = Shard {
            layout: &layout,
            address: "h:2",
        };
        assert!(holds(Some(&first), "b") && !holds(Some(&first), "a"));
        assert!(holds(Some(&second), "a") && !holds(Some(&second), "b"));
        // The hash tag decides: {b} is in b's slot.
        assert!(holds(Some(&first), "x{b}y"));
        assert!(holds(None, "a") && holds(None, "b"));
    }
}
