//! A guard's etcd lock: the cluster as a [`cluster::Store`], and the guard
//! of a fresh lock.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::Cluster;
use super::keepalive::{Entry, EtcdRound};
use super::lease::{Keys, give_back, relocate};
use crate::backend::cluster::{self, ClientState, ClusterHold, Lock};
use crate::error::Result;
use crate::lock::guard::Guard;
use crate::lock::lease::Lease;
use crate::lock::state::Held;

impl cluster::Store for Cluster {
    type Kept = Keys;
    type Renewed = Arc<Entry>;

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

    fn state(&self) -> &ClientState<Keys, Arc<Entry>> {
        &self.state
    }

    /// Moves the lock to a lease of `ttl` (see [`relocate`]): valid for
    /// that lease, measured from the grant's sending.
    fn renew_now(lock: Lock<'_, Self>, ttl: Duration) -> BoxFuture<'_, Result<Lease>> {
        async move {
            let seconds = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
            let (sent, granted) = relocate(lock.store, lock.kept, seconds, lock.held.ttl()).await?;
            Ok(lock.store.lease(sent, granted))
        }
        .boxed()
    }

    fn give_back(lock: Lock<'_, Self>) -> BoxFuture<'_, Result<Option<Instant>>> {
        give_back(lock.store, lock.held, lock.kept).boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }
}
