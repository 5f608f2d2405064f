//! Probes for operators' tools, as `quorumlock check` uses them: what the
//! library sends a store, tried as the store's user, and what a store is
//! made of. Not for taking or keeping a lock (the [`Redlock`](crate::Redlock)
//! client does that): a probe writes only throwaway keys of the reserved
//! namespace ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)) and deletes them
//! again.
//!
//! - [`NodeKind`]: which store a node URL names, by its scheme;
//! - on Redis: every command the library sends a node ([`COMMANDS`]), and
//!   a [`Probe`] that tries each one;
//! - [`member_layout`]: what a Redis Cluster or a Sentinel-managed member
//!   is made of, as it answers now;
//! - `etcd` (with the `etcd` feature): each member of an etcd cluster, and
//!   whether the lock's prefix can be written.

pub use crate::backend::redlock::wire::probe::*;

/// Each member of an etcd cluster, and whether the lock's prefix can be
/// written.
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use crate::backend::etcd::probe::*;
}

pub use crate::backend::node_kind::NodeKind;
pub use crate::backend::redlock::node::{Layout as MemberLayout, layout_of as member_layout};

/// A majority of `nodes`, `nodes / 2 + 1`: how many Redis nodes must grant
/// a Redlock lock, and how many members an etcd cluster or servers a
/// ZooKeeper ensemble needs up to write at all. An even count needs as many as the next odd one and
/// survives no more failures than the odd one below it.
///
/// ```
/// assert_eq!(quorumlock::probe::majority(5), 3);
/// assert_eq!(quorumlock::probe::majority(4), 3);
/// ```
pub fn majority(nodes: usize) -> usize {
    crate::backend::redlock::quorum::quorum(nodes)
}

/// The clock drift allowance a client with the default settings takes off
/// a lock of `ttl` (see [`RedlockBuilder::drift`](crate::RedlockBuilder::drift)): a node
/// whose key outlives the lock's validity by less than this still keeps
/// other owners out.
///
/// ```
/// use std::time::Duration;
/// let drift = quorumlock::probe::default_drift(Duration::from_secs(10));
/// assert_eq!(drift, Duration::from_millis(102));
/// ```
pub fn default_drift(ttl: std::time::Duration) -> std::time::Duration {
    crate::lock::lease::drift(
        ttl,
        crate::config::DEFAULT_DRIFT_FACTOR,
        crate::config::DEFAULT_DRIFT_FIXED,
    )
}
