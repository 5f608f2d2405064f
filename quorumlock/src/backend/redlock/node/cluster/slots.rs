//! A Redis Cluster member's map of which primary serves which hash slot.

use crate::backend::redlock::wire::cluster::SlotRange;
use crate::backend::redlock::wire::keys::SLOTS;

/// No primary known for a slot.
const UNKNOWN: u16 = u16::MAX;

/// Which primary serves each slot, by address (`host:port`).
#[derive(Debug, Clone)]
pub(crate) struct SlotMap {
    /// Per slot, an index into `addresses`, or [`UNKNOWN`].
    owners: Box<[u16]>,
    addresses: Vec<String>,
}

impl Default for SlotMap {
    fn default() -> Self {
        SlotMap {
            owners: vec![UNKNOWN; usize::from(SLOTS)].into_boxed_slice(),
            addresses: Vec::new(),
        }
    }
}

impl SlotMap {
    /// The map `CLUSTER SLOTS` answered, asked of the server at
    /// `asked_host` (the host of a primary that announces none).
    pub(crate) fn from_ranges(ranges: &[SlotRange], asked_host: &str) -> SlotMap {
        let mut map = SlotMap::default();
        for range in ranges {
            let host = range.host.as_deref().unwrap_or(asked_host);
            let address = format!("{host}:{}", range.port);
            for slot in range.first..=range.last {
                map.set(slot, &address);
            }
        }
        map
    }

    /// Whether no slot has a known primary (before the first refresh).
    pub(crate) fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// The primary that serves `slot`, if known.
    #[cfg(test)]
    pub(crate) fn owner(&self, slot: u16) -> Option<&str> {
        self.addresses.get(self.owner_index(slot)?).map(String::as_str)
    }

    /// The index in [`SlotMap::addresses`] of the primary that serves
    /// `slot`, if known.
    pub(crate) fn owner_index(&self, slot: u16) -> Option<usize> {
        let index = usize::from(*self.owners.get(usize::from(slot))?);
        (index < self.addresses.len()).then_some(index)
    }

    /// Records that `address` serves `slot` (a `MOVED` refusal said so).
    pub(crate) fn set(&mut self, slot: u16, address: &str) {
        let Some(owner) = self.owners.get_mut(usize::from(slot)) else {
            return;
        };
        let index = match self.addresses.iter().position(|known| known == address) {
            Some(index) => index,
            None => {
                self.addresses.push(address.to_owned());
                self.addresses.len() - 1
            }
        };
        *owner = u16::try_from(index).unwrap_or(UNKNOWN);
    }

    /// Every primary the map names (possibly one that lost all its slots
    /// to `MOVED` updates since the last refresh).
    pub(crate) fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// The slots of each primary, as ranges, for `quorumlock check`.
    pub(crate) fn ranges(&self) -> Vec<(String, Vec<(u16, u16)>)> {
        let mut out: Vec<(String, Vec<(u16, u16)>)> =
            self.addresses.iter().map(|a| (a.clone(), Vec::new())).collect();
        for (slot, &index) in (0..SLOTS).zip(self.owners.iter()) {
            let Some((_, ranges)) = out.get_mut(usize::from(index)) else {
                continue;
            };
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == slot => *last = slot,
                _ => ranges.push((slot, slot)),
            }
        }
        out.retain(|(_, ranges)| !ranges.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_names_the_owner_of_each_slot_and_follows_a_move() {
        let ranges = [
            SlotRange {
                first: 0,
                last: 8191,
                host: Some("10.0.0.1".into()),
                port: 7000,
            },
            SlotRange {
                first: 8192,
                last: 16383,
                host: None,
                port: 7001,
            },
        ];
        let mut map = SlotMap::from_ranges(&ranges, "127.0.0.1");
        assert_eq!(map.owner(0), Some("10.0.0.1:7000"));
        assert_eq!(map.owner(16383), Some("127.0.0.1:7001"));
        assert_eq!(map.owner(16384), None);
        map.set(5, "127.0.0.1:7001");
        assert_eq!(map.owner(5), Some("127.0.0.1:7001"));
        assert_eq!(
            map.ranges(),
            [
                ("10.0.0.1:7000".to_owned(), vec![(0, 4), (6, 8191)]),
                ("127.0.0.1:7001".to_owned(), vec![(5, 5), (8192, 16383)]),
            ]
        );
        assert!(SlotMap::default().is_empty());
        assert_eq!(SlotMap::default().owner(1), None);
    }
}
