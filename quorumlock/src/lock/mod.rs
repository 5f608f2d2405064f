//! The lock core: what a lock is on every store, and the seams a store is
//! written against. It names no store.
//!
//! - [`resources`]: the names a lock takes, and the reserved namespace;
//! - [`state`]: one held lock's validity, loss signal and renewal schedule
//!   ([`Held`](state::Held));
//! - [`lease`]: the one validity rule and the one ttl rule;
//! - [`guard`]: the holder's handle, over its store's [`hold::Hold`], with
//!   how it was taken ([`acquisition`]);
//! - [`renewal`]: the one renewal loop, with a [`renewal::Round`] per store;
//! - [`holders`]: the locks a shutdown gives back; [`registry`]: locks by id;
//! - [`report`] and [`inspection`]: what a release, an inspection and an
//!   unlock found.

pub(crate) mod acquisition;
pub(crate) mod guard;
pub(crate) mod hold;
pub(crate) mod holders;
pub(crate) mod inspection;
pub(crate) mod lease;
pub(crate) mod registry;
pub(crate) mod renewal;
pub(crate) mod report;
pub(crate) mod resources;
pub(crate) mod state;
pub(crate) mod watch;
