//! [`ClusterHold`]: a guard's hold on a store that is one cluster.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};

use super::{Lock, Store, release};
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::hold::Hold;
use crate::lock::report::ReleaseReport;
use crate::lock::state::Held;
use crate::metrics::Loss;

/// What a guard of a lock on a cluster holds besides the lock's state.
#[derive(Debug)]
pub(crate) struct ClusterHold<S: Store> {
    store: Arc<S>,
    kept: Arc<S::Kept>,
    /// Registration with the store's holders, for a shutdown.
    holder: Option<u64>,
    /// Registration with the renewal loop, when auto-renewed.
    renewal: Option<u64>,
}

impl<S: Store> ClusterHold<S> {
    /// The guard of a fresh lock on `store`, registered with its holders;
    /// `renewal` is its registration with the renewal loop, if renewed.
    pub(crate) fn guard(
        store: &Arc<S>,
        held: Arc<Held>,
        kept: Arc<S::Kept>,
        renewal: Option<u64>,
        min_validity: Duration,
    ) -> Guard {
        let hold = ClusterHold {
            holder: Some(store.state().holders.insert(&held, Arc::clone(&kept))),
            store: Arc::clone(store),
            kept,
            renewal,
        };
        Guard::new(held, Box::new(hold), min_validity)
    }

    /// Makes the lock valid for `ttl` from the store's confirmation, leaving
    /// at least `min_validity`.
    async fn extend_on_store(&self, held: &Held, ttl: Duration, min_validity: Duration) -> Result<()> {
        let ttl = self.store.state().check_ttl(ttl, min_validity)?;
        if self.store.state().is_closed() {
            return Err(Error::Closed);
        }
        if !held.is_held() {
            return Err(self.lost_error(0));
        }
        let lease = match S::renew_now(Lock::new(&self.store, held, &self.kept), ttl).await {
            Ok(lease) => lease,
            Err(error @ Error::Lost { .. }) => {
                held.mark_lost(Loss::Taken);
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        lease.left(min_validity)?;
        if !held.confirm(&lease, 1) {
            return Err(self.lost_error(0));
        }
        Ok(())
    }
}

impl<S: Store> Hold for ClusterHold<S> {
    fn round(&self) -> Duration {
        self.store.state().request_timeout
    }

    fn is_closed(&self) -> bool {
        self.store.state().is_closed()
    }

    fn lost_error(&self, _confirmed: usize) -> Error {
        self.store.state().lost()
    }

    fn extend<'a>(
        &'a self,
        held: &'a Held,
        ttl: Duration,
        min_validity: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        self.extend_on_store(held, ttl, min_validity).boxed()
    }

    fn release<'a>(&'a self, held: &'a Held, claimed: bool) -> BoxFuture<'a, Result<ReleaseReport>> {
        release(claimed, S::give_back(Lock::new(&self.store, held, &self.kept))).boxed()
    }

    fn release_in_background(&self, held: &Arc<Held>) {
        self.store.give_back_in_background(held, &self.kept);
    }

    fn stop_renewal(&mut self) {
        if let Some(id) = self.renewal.take() {
            self.store.state().renewal.unregister(id);
        }
    }

    fn unregister(&mut self) {
        if let Some(id) = self.holder.take() {
            self.store.state().holders.remove(id);
        }
    }
}
