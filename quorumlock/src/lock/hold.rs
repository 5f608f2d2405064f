//! [`Hold`]: the seam between a [`Guard`](crate::Guard) and the store its
//! lock lives in.
//!
//! The guard keeps what every backend shares (the lock's [`Held`] state,
//! the validity, the loss signal); a backend's hold keeps the rest (its
//! registrations with the store's renewal and holders, its keys or nodes)
//! and does the store's half of extend and release. The guard never knows
//! which store it is on.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::report::ReleaseReport;
use super::state::Held;
use crate::error::{Error, Result};

/// A backend's half of one held lock.
///
/// Boxed behind the guard: a call to a store takes a network round trip,
/// next to which the box and the dynamic call cost nothing, and each store
/// keeps its own shape of state.
pub(crate) trait Hold: Send + Sync + fmt::Debug {
    /// How long one request to the store may take (the client's node
    /// timeout, or a store's own minimum): a renewal's round, which work
    /// must leave room for before the validity ends.
    fn round(&self) -> Duration;

    /// Whether the client was shut down.
    fn is_closed(&self) -> bool;

    /// The [`Error::Lost`] for this lock, with `confirmed` members
    /// ([`Error::Closed`] once the client shut down, which takes every lock).
    fn lost_error(&self, confirmed: usize) -> Error;

    /// Makes the lock valid for `ttl` from now on the store, leaving at
    /// least `min_validity`; see [`Guard::extend`](crate::Guard::extend).
    fn extend<'a>(
        &'a self,
        held: &'a Held,
        ttl: Duration,
        min_validity: Duration,
    ) -> BoxFuture<'a, Result<()>>;

    /// Gives the lock back on the store. `claimed` is `false` when a loss or
    /// a shutdown began giving it back first.
    fn release<'a>(&'a self, held: &'a Held, claimed: bool) -> BoxFuture<'a, Result<ReleaseReport>>;

    /// Gives the lock back as tracked background work: for a guard dropped
    /// without a release. Never blocks.
    fn release_in_background(&self, held: &Arc<Held>);

    /// Ends the lock's renewal (no renewal round starts after it).
    fn stop_renewal(&mut self);

    /// Ends the registration with the client's holders, which a shutdown
    /// releases.
    fn unregister(&mut self);
}
