//! What the two stores that are one cluster each (etcd, ZooKeeper) share:
//! the cluster counts as one member, whose own quorum (Raft, ZAB) replaces
//! the Redlock majority; the registry of held locks that a shutdown gives
//! back; the errors in a member-of-one's terms.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::join_all;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lock::registry::Registry;
use crate::lock::report::ReleaseReport;
use crate::lock::resources::Resources;
use crate::lock::state::Held;
use crate::metrics::Loss;

/// Every lock a guard of one client holds on the cluster, with what the
/// store keeps of it (`T`: its keys, its nodes), for a shutdown.
#[derive(Debug)]
pub(crate) struct Holders<T>(Mutex<Registry<(Arc<Held>, Arc<T>)>>);

impl<T> Default for Holders<T> {
    fn default() -> Self {
        Holders(Mutex::default())
    }
}

impl<T> Holders<T> {
    fn registry(&self) -> MutexGuard<'_, Registry<(Arc<Held>, Arc<T>)>> {
        // Plain data, valid after a panic in another thread.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, held: &Arc<Held>, kept: &Arc<T>) -> u64 {
        self.registry().insert((Arc::clone(held), Arc::clone(kept)))
    }

    pub(crate) fn remove(&self, id: u64) {
        self.registry().remove(id);
    }

    /// A shutdown's releases: marks every held lock lost and gives back,
    /// by `deadline`, those whose release nobody began; each with whether
    /// the store confirmed it.
    pub(crate) async fn give_back_all<F, G>(&self, deadline: Instant, give_back: G) -> Vec<(Resources, bool)>
    where
        G: Fn(Arc<Held>, Arc<T>) -> F,
        F: Future<Output = bool>,
    {
        let held = self.registry().take_all();
        let releases = held.into_iter().filter_map(|(held, kept)| {
            held.mark_lost(Loss::Shutdown);
            held.claim_release().then(|| {
                let resources = held.resources.clone();
                let given = tokio::time::timeout_at(deadline, give_back(held, kept));
                async move { (resources, given.await.unwrap_or(false)) }
            })
        });
        join_all(releases).await
    }
}

/// Another owner holds the lock.
pub(crate) fn held() -> Error {
    Error::Held {
        refused: 1,
        nodes: 1,
        errors: Vec::new(),
    }
}

/// The lock is no longer ours ([`Error::Closed`] once the client shut
/// down, which takes every lock).
pub(crate) fn lost(closed: bool) -> Error {
    if closed {
        return Error::Closed;
    }
    Error::Lost {
        confirmed: 0,
        quorum: 1,
        nodes: 1,
    }
}

/// A release on the cluster: its keys `deleted`, or kept until
/// `kept_until`; or, when a loss or a shutdown began giving the lock back
/// first (`claimed` false), nothing more to do.
pub(crate) async fn release(
    claimed: bool,
    give_back: impl Future<Output = Result<Option<Instant>>>,
) -> Result<ReleaseReport> {
    if !claimed {
        return Ok(one_member(false, None));
    }
    let kept_until = give_back.await?;
    Ok(one_member(kept_until.is_none(), kept_until))
}

fn one_member(deleted: bool, kept_until: Option<Instant>) -> ReleaseReport {
    ReleaseReport {
        nodes: 1,
        confirmed: 1,
        deleted: usize::from(deleted),
        kept: usize::from(kept_until.is_some()),
        kept_until,
    }
}
