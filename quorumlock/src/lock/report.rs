//! [`ReleaseReport`]: what giving a lock back achieved, on any store.

use tokio::time::Instant;

/// What [`Guard::release`](crate::Guard::release) achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseReport {
    /// Nodes configured.
    pub nodes: usize,
    /// Nodes that answered before the release returned: our token is no
    /// longer there. At least a majority; the other nodes' deletes complete
    /// in the background.
    pub confirmed: usize,
    /// Of those, nodes where our token was still present and was deleted
    /// (the others had already expired or lost it).
    pub deleted: usize,
    /// Of those, nodes where our token was still present and was kept, to
    /// expire at [`ReleaseReport::kept_until`].
    pub kept: usize,
    /// Set when the lock was given back before its minimum hold
    /// ([`crate::LockOptions::min_hold`]) had passed: its keys were not
    /// deleted, and expire at this instant. Until then nobody else can
    /// take the lock.
    pub kept_until: Option<Instant>,
}
