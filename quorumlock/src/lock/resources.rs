//! The resource names of one lock.

use std::sync::Arc;

use crate::error::{Error, Result, Setting};

/// The prefix of every key and channel the library owns besides the lock
/// keys, on every store. Resource names starting with it are refused
/// (`Error::Config`), so that no lock can overwrite or block one of these
/// keys and none of them can collide with a lock.
pub const RESERVED_PREFIX: &str = "quorumlock:";

/// Whether `resource` lies in the reserved namespace.
pub(crate) fn is_reserved(resource: &str) -> bool {
    resource.starts_with(RESERVED_PREFIX)
}

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
            if is_reserved(name) {
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
}

/// Most resources one lock may take.
///
/// Each node takes all of a lock's keys in one script call, and Redis serves
/// nobody else while a script runs: the bound keeps every such call (acquire,
/// release, extend, a renewal's share, the hand-off queues) a short, constant
/// amount of work. 64 covers an order with a line per item; more resources
/// than that are better locked under one coarser name.
pub const MAX_RESOURCES: usize = 64;

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
