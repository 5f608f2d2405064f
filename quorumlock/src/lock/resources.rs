//! The resource names of one lock.

use std::sync::Arc;

use crate::backend::redlock::wire::MAX_LOCK_KEYS;
use crate::backend::redlock::wire::keys::{self, RESERVED_PREFIX};
use crate::error::{Error, Result, Setting};

/// The resource names of one lock: one key per resource on every node.
///
/// Built from a `&str`, a `String`, or a list of them (a multi-resource lock,
/// taken all-or-nothing on each node). Names are used as Redis keys as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources(Arc<[String]>);

impl Resources {
    /// The names, in the order given.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// The names as the wire layer takes them (shared, not copied).
    pub(crate) fn keys(&self) -> &Arc<[String]> {
        &self.0
    }

    /// Checks the names: at least one and at most [`MAX_RESOURCES`], none
    /// empty, none twice, none in the reserved namespace
    /// ([`RESERVED_PREFIX`]).
    pub(crate) fn validated(self) -> Result<Self> {
        if self.0.is_empty() {
            return Err(Error::config(Setting::Resources, "no resource given"));
        }
        if self.0.len() > MAX_RESOURCES {
            return Err(Error::config(
                Setting::Resources,
                format!("{} resources in one lock, at most {MAX_RESOURCES}", self.0.len()),
            ));
        }
        // A set only where a name can repeat: most locks have one resource,
        // and this runs on every lock call.
        let mut seen = (self.0.len() > 1).then(|| std::collections::HashSet::with_capacity(self.0.len()));
        for name in self.0.iter() {
            if name.is_empty() {
                return Err(Error::config(Setting::Resources, "empty resource name"));
            }
            if keys::is_reserved(name) {
                return Err(Error::config(
                    Setting::Resources,
                    format!("resource {name:?} is in quorumlock's reserved namespace {RESERVED_PREFIX:?}"),
                ));
            }
            if seen.as_mut().is_some_and(|seen| !seen.insert(name.as_str())) {
                return Err(Error::config(
                    Setting::Resources,
                    format!("resource {name:?} given twice"),
                ));
            }
        }
        Ok(self)
    }

    /// Checks that the lock's keys fit a Redis Cluster member: a script
    /// there may touch keys of one hash slot only, so every resource of a
    /// lock, and every key derived from one (fence, hand-off queue), must
    /// share a slot.
    pub(crate) fn check_one_slot(&self) -> Result<()> {
        let advice = "on a Redis Cluster member a lock's keys must share a hash slot: give them one \
                      hash tag, as in {order:42}:stock and {order:42}:payment";
        if let Some(name) = self.0.iter().find(|name| !keys::derives_in_slot(name)) {
            return Err(Error::config(
                Setting::Resources,
                format!(
                    "resource {name:?} has a `}}` but no hash tag, so its fence and queue keys cannot share its slot; {advice}"
                ),
            ));
        }
        let first = keys::slot(&self.0[0]);
        if self.0.iter().any(|name| keys::slot(name) != first) {
            let slots: Vec<String> = self
                .0
                .iter()
                .map(|name| format!("{name:?} in slot {}", keys::slot(name)))
                .collect();
            return Err(Error::config(
                Setting::Resources,
                format!("{}; {advice}", slots.join(", ")),
            ));
        }
        Ok(())
    }
}

/// Most resources one lock may take.
///
/// Each node takes all of a lock's keys in one script call, and Redis serves
/// nobody else while a script runs: the bound keeps every such call (acquire,
/// release, extend, a renewal's share, the hand-off queues) a short, constant
/// amount of work. 64 covers an order with a line per item; more resources
/// than that are better locked under one coarser name.
pub const MAX_RESOURCES: usize = 64;

// The scripts' documented bounds assume no lock has more keys than this.
const _: () = assert!(MAX_RESOURCES <= MAX_LOCK_KEYS);

impl From<&str> for Resources {
    fn from(name: &str) -> Self {
        Resources(Arc::new([name.to_owned()]))
    }
}

impl From<String> for Resources {
    fn from(name: String) -> Self {
        Resources(Arc::new([name]))
    }
}

impl From<&String> for Resources {
    fn from(name: &String) -> Self {
        Resources::from(name.as_str())
    }
}

impl<S: AsRef<str>> From<&[S]> for Resources {
    fn from(names: &[S]) -> Self {
        Resources(names.iter().map(|n| n.as_ref().to_owned()).collect())
    }
}

impl<S: AsRef<str>, const N: usize> From<[S; N]> for Resources {
    fn from(names: [S; N]) -> Self {
        Resources::from(&names[..])
    }
}

impl<S: AsRef<str>> From<Vec<S>> for Resources {
    fn from(names: Vec<S>) -> Self {
        Resources::from(&names[..])
    }
}
