//! A guard's etcd lock: its registrations with the store, and extend.

use std::sync::Arc;
use std::time::Duration;

use super::Store;
use super::lease::{Keys, relocate};
use crate::error::{Error, Result};
use crate::lock::state::Held;
use crate::metrics::Loss;

/// What a guard of an etcd lock holds besides the lock's state.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) store: Arc<Store>,
    pub(crate) keys: Arc<Keys>,
    /// Registration with the store's holders, for a shutdown.
    holder: u64,
    /// Registration with the keep-alive task, when auto-renewed.
    renewal: Option<u64>,
}

impl Hold {
    /// Registers a fresh lock with the store (and its keep-alive task when
    /// `renew`).
    pub(crate) fn new(store: &Arc<Store>, held: &Arc<Held>, keys: Keys, renew: bool) -> Hold {
        let keys = Arc::new(keys);
        let holder = store.holders().insert((Arc::clone(held), Arc::clone(&keys)));
        let renewal = renew.then(|| super::keepalive::register(store, held, &keys));
        Hold {
            store: Arc::clone(store),
            keys,
            holder,
            renewal,
        }
    }

    /// Ends renewal and the registration with the holders.
    pub(crate) fn forget(&mut self) {
        if let Some(id) = self.renewal.take() {
            self.store.keepalive.unregister(id);
        }
        self.store.holders().remove(self.holder);
    }

    /// Moves the lock to a lease of `ttl` (see [`relocate`]) and makes the
    /// lock valid for that lease, measured from the grant's sending.
    pub(crate) async fn extend(&self, held: &Held, ttl: Duration, min_validity: Duration) -> Result<()> {
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
