//! A guard's etcd lock: the cluster as a [`cluster::Store`], and the guard
//! of a fresh lock.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::Cluster;
use super::keepalive::{Entry, EtcdRound};
use super::lease::{Keys, give_back, give_back_in_background, relocate};
use crate::backend::cluster::{self, ClusterHold};
use crate::error::{Error, NodeErrorKind, Result, StoreFailure};
use crate::lock::guard::Guard;
use crate::lock::holders::Holders;
use crate::lock::lease::Lease;
use crate::lock::state::Held;
use crate::tasks::Tasks;

impl cluster::Store for Cluster {
    type Kept = Keys;

    /// Registered with the renewal when `renew`.
    fn guard(self: &Arc<Self>, held: Held, keys: Keys, renew: bool, min_validity: Duration) -> Guard {
        let (held, keys) = (Arc::new(held), Arc::new(keys));
        let renewal = renew.then(|| {
            let entry = Entry::new(&keys);
            self.state
                .renewal
                .register(&held, entry, || EtcdRound(Arc::clone(self)))
        });
        ClusterHold::guard(self, held, keys, renewal, min_validity)
    }

    /// Our key vanished while we waited: the lease lapsed.
    fn lost_in_line(&self) -> Error {
        self.unreachable(NodeErrorKind::Etcd(StoreFailure::new(
            "the waiter's lease expired while it waited",
        )))
    }

    fn request_timeout(&self) -> Duration {
        self.state.request_timeout
    }

    fn tasks(&self) -> &Arc<Tasks> {
        &self.state.tasks
    }

    fn holders(&self) -> &Holders<Arc<Keys>> {
        &self.state.holders
    }

    fn check_ttl(&self, ttl: Duration, min_validity: Duration) -> Result<Duration> {
        self.lease_ttl(ttl, min_validity)
    }

    fn stop_renewal(&self, id: u64) {
        self.state.renewal.unregister(id);
    }

    /// Moves the lock to a lease of `ttl` (see [`relocate`]): valid for
    /// that lease, measured from the grant's sending.
    fn renew_now<'a>(
        self: &'a Arc<Self>,
        held: &'a Held,
        keys: &'a Keys,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Lease>> {
        async move {
            let seconds = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
            let (sent, granted) = relocate(self, keys, seconds, held.ttl()).await?;
            Ok(self.lease(sent, granted))
        }
        .boxed()
    }

    fn give_back<'a>(
        self: &'a Arc<Self>,
        held: &'a Held,
        keys: &'a Arc<Keys>,
    ) -> BoxFuture<'a, Result<Option<Instant>>> {
        give_back(self, held, keys).boxed()
    }

    fn give_back_in_background(self: &Arc<Self>, held: &Arc<Held>, keys: &Arc<Keys>) {
        give_back_in_background(self, held, keys);
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }
}
