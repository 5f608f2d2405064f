//! [`Registry`]: locks by id, for the watchdog (the locks it renews) and for
//! a shutdown (the locks whose guards are still alive).

use std::collections::BTreeMap;

/// Entries by an id handed out on insertion.
///
/// Ids count up, so every new entry goes at the end, and a B-tree needs no
/// hashing: cheaper than a hash map on every lock call.
#[derive(Debug)]
pub(crate) struct Registry<T> {
    entries: BTreeMap<u64, T>,
    next_id: u64,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            entries: BTreeMap::new(),
            next_id: 0,
        }
    }
}

impl<T> Registry<T> {
    /// Adds `entry`; returns the id to remove it with.
    pub(crate) fn insert(&mut self, entry: T) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(id, entry);
        id
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        self.entries.remove(&id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps the entries for which `keep` (given each id and entry)
    /// returns `true`, in id order.
    pub(crate) fn retain_with_ids(&mut self, mut keep: impl FnMut(u64, &T) -> bool) {
        self.entries.retain(|id, entry| keep(*id, entry));
    }

    /// Every entry, taken out, in id order.
    pub(crate) fn take_all(&mut self) -> Vec<T> {
        std::mem::take(&mut self.entries).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_and_order_is_kept() {
        let mut registry = Registry::default();
        let a = registry.insert("a");
        let b = registry.insert("b");
        assert_eq!(registry.remove(a), Some("a"));
        let c = registry.insert("c");
        assert!(a != c && b != c);
        registry.retain_with_ids(|_, entry| *entry != "x");
        assert_eq!(registry.take_all(), ["b", "c"]);
        assert!(registry.is_empty());
        assert_eq!(registry.remove(b), None);
    }
}
