//! The lock layer: what a lock is and how it is taken, kept and given back.
//!
//! - [`resources`]: the names a lock takes;
//! - [`state`]: one held lock's validity, loss signal and renewal schedule;
//! - [`attempt`]: one acquisition (acquire on every node, then finish or
//!   undo), and [`waiter`]: the attempts of a caller that waits, with the
//!   hand-off queues;
//! - [`guard`]: the holder's handle, with how it was taken
//!   ([`acquisition`]); [`watchdog`]: the renewal of every held
//!   lock; [`release`]: giving a lock back; [`fence`]: fencing tokens;
//! - [`kind`]: what an attempt does besides taking the keys (fenced,
//!   queued), chosen once;
//! - [`registry`]: locks by id; [`shared`]: what all locks of one client
//!   share;
//! - `in_line`: the attempts of a caller on a store that keeps its own line
//!   of waiters (etcd, ZooKeeper).
//!
//! It speaks to the nodes only through the quorum layer, with requests of
//! the wire layer.

pub(crate) mod acquisition;
pub(crate) mod guard;
pub(crate) mod hold;
pub(crate) mod holders;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) mod in_line;
pub(crate) mod inspection;
pub(crate) mod lease;
pub(crate) mod registry;
pub(crate) mod renewal;
pub(crate) mod report;
pub(crate) mod resources;
pub(crate) mod state;
