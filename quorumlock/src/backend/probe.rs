//! Probes for operators' tools, as `quorumlock check` uses them: what the
//! library sends a store, tried as the store's user, and what a store is
//! made of. Not for taking or keeping a lock (the [`Redlock`](crate::Redlock)
//! client does that): a probe writes only throwaway keys of the reserved
//! namespace ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)) and deletes them
//! again.
//!
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

pub use crate::backend::redlock::node::{Layout as MemberLayout, layout_of as member_layout};
