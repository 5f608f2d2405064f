//! [`Holders`]: the locks a client's guards hold, for a shutdown.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::join_all;

use super::registry::Registry;
use super::resources::Resources;
use super::state::Held;
use crate::metrics::Loss;

/// Every lock a guard of one client holds, with what its store keeps of it
/// (`T`: etcd keys, ZooKeeper nodes), so that a shutdown can give back the
/// locks whose guards are still alive.
#[derive(Debug)]
pub(crate) struct Holders<T = ()>(Mutex<Registry<(Arc<Held>, T)>>);

impl<T> Default for Holders<T> {
    fn default() -> Self {
        Holders(Mutex::default())
    }
}

impl<T> Holders<T> {
    fn registry(&self) -> MutexGuard<'_, Registry<(Arc<Held>, T)>> {
        // Plain data, valid after a panic in another thread.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, held: &Arc<Held>, kept: T) -> u64 {
        self.registry().insert((Arc::clone(held), kept))
    }

    pub(crate) fn remove(&self, id: u64) {
        self.registry().remove(id);
    }

    /// A shutdown's releases: marks every held lock lost and gives back
    /// those whose release nobody began, at once; each with whether
    /// `give_back` (bounded by the shutdown's deadline) says the store
    /// confirmed it.
    pub(crate) async fn give_back_all<F, G>(&self, give_back: G) -> Vec<(Resources, bool)>
    where
        G: Fn(Arc<Held>, T) -> F,
        F: Future<Output = bool>,
    {
        let held = self.registry().take_all();
        let releases = held.into_iter().filter_map(|(held, kept)| {
            held.mark_lost(Loss::Shutdown);
            held.claim_release().then(|| {
                let resources = held.resources.clone();
                let given = give_back(held, kept);
                async move { (resources, given.await) }
            })
        });
        join_all(releases).await
    }
}
