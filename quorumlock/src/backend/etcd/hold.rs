//! A guard's etcd lock: its registrations with the store, extend and
//! release.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};

use super::Cluster;
use super::keepalive::{Entry, EtcdRound};
use super::lease::{Keys, give_back, give_back_in_background, relocate};
use crate::backend::cluster;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::hold::Hold;
use crate::lock::report::ReleaseReport;
use crate::lock::state::Held;
use crate::metrics::Loss;

/// What a guard of an etcd lock holds besides the lock's state.
#[derive(Debug)]
pub(crate) struct EtcdHold {
    pub(crate) store: Arc<Cluster>,
    pub(crate) keys: Arc<Keys>,
    /// Registration with the store's holders, for a shutdown.
    holder: Option<u64>,
    /// Registration with the keep-alive task, when auto-renewed.
    renewal: Option<u64>,
}

/// The guard of a fresh lock, registered with the store (and its
/// keep-alive task when `renew`).
pub(crate) fn guard(
    store: &Arc<Cluster>,
    (held, keys): (Held, Keys),
    renew: bool,
    min_validity: Duration,
) -> Guard {
    let (held, keys) = (Arc::new(held), Arc::new(keys));
    let hold = EtcdHold {
        holder: Some(store.holders.insert(&held, Arc::clone(&keys))),
        renewal: renew.then(|| {
            let entry = Entry::new(&keys);
            store
                .renewal
                .register(&held, entry, || EtcdRound(Arc::clone(store)))
        }),
        store: Arc::clone(store),
        keys,
    };
    Guard::new(held, Box::new(hold), min_validity)
}

impl EtcdHold {
    /// Moves the lock to a lease of `ttl` (see [`relocate`]) and makes the
    /// lock valid for that lease, measured from the grant's sending.
    async fn extend_lease(&self, held: &Held, ttl: Duration, min_validity: Duration) -> Result<()> {
        let store = &self.store;
        let seconds = store.check_ttl(ttl, min_validity)?;
        if store.is_closed() {
            return Err(Error::Closed);
        }
        if !held.is_held() {
            return Err(store.lost());
        }
        let (sent, granted) = match relocate(store, &self.keys, seconds, held.ttl()).await {
            Ok(relocated) => relocated,
            Err(error @ Error::Lost { .. }) => {
                held.mark_lost(Loss::Taken);
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        let lease = store.lease(sent, granted);
        lease.left(min_validity)?;
        if !held.confirm(&lease, 1) {
            return Err(store.lost());
        }
        Ok(())
    }
}

impl Hold for EtcdHold {
    fn round(&self) -> Duration {
        self.store.request_timeout
    }

    fn is_closed(&self) -> bool {
        self.store.is_closed()
    }

    fn lost_error(&self, _confirmed: usize) -> Error {
        self.store.lost()
    }

    fn extend<'a>(
        &'a self,
        held: &'a Held,
        ttl: Duration,
        min_validity: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        self.extend_lease(held, ttl, min_validity).boxed()
    }

    fn release<'a>(&'a self, held: &'a Held, claimed: bool) -> BoxFuture<'a, Result<ReleaseReport>> {
        cluster::release(claimed, give_back(&self.store, held, &self.keys)).boxed()
    }

    fn release_in_background(&self, held: &Arc<Held>) {
        give_back_in_background(&self.store, held, &self.keys);
    }

    fn stop_renewal(&mut self) {
        if let Some(id) = self.renewal.take() {
            self.store.renewal.unregister(id);
        }
    }

    fn unregister(&mut self) {
        if let Some(id) = self.holder.take() {
            self.store.holders.remove(id);
        }
    }
}
