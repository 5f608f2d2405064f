//! The etcd round of the renewal loop ([`crate::lock::renewal`]): each due
//! lock's lease gets one keep-alive, and every key of the lock is checked
//! to exist as created in the same breath; the rounds of all due locks run
//! at once. A lock counts as renewed from the instant its keep-alive was
//! sent, with the ttl the cluster answered, so its validity never outlasts
//! the lease on the cluster (within the drift allowance).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::Txn;
use futures::future::join_all;
use tokio::time::Instant;

use super::Cluster;
use super::keeper::{Keeper, KeptAlive};
use super::lease::Keys;
use crate::backend::cluster::Store as _;
use crate::config::etcd::ETCD_RENEW_RETRY;
use crate::error::{NodeErrorKind, Result};
use crate::lock::renewal::{Outcome, Renewed, Round};
use crate::lock::state::Held;
use crate::tasks::Tasks;

/// What the renewal of one etcd lock keeps: its keys, and its lease's
/// keep-alive stream, opened by the first round.
pub(crate) struct Entry {
    keys: Arc<Keys>,
    keeper: tokio::sync::Mutex<Option<Keeper>>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl Entry {
    pub(crate) fn new(keys: &Arc<Keys>) -> Arc<Entry> {
        Arc::new(Entry {
            keys: Arc::clone(keys),
            keeper: tokio::sync::Mutex::new(None),
        })
    }
}

/// The cluster a round goes to.
#[derive(Debug)]
pub(crate) struct EtcdRound(pub(crate) Arc<Cluster>);

impl Round for EtcdRound {
    type Kept = Arc<Entry>;

    fn tasks(&self) -> &Arc<Tasks> {
        &self.0.state.tasks
    }

    fn retry_delay(&self) -> Duration {
        ETCD_RENEW_RETRY
    }

    fn renew(&self, due: &[Renewed<Arc<Entry>>]) -> impl Future<Output = Vec<Outcome>> + Send {
        join_all(due.iter().map(|renewed| renew(&self.0, renewed)))
    }

    fn give_back(&self, held: &Arc<Held>, entry: &Arc<Entry>) {
        self.0.give_back_in_background(held, &entry.keys);
    }
}

/// One lock's keep-alive and what it found.
async fn renew(store: &Cluster, renewed: &Renewed<Arc<Entry>>) -> Outcome {
    let entry = &renewed.kept;
    let lease = entry.keys.lease();
    let kept = keep_alive(store, entry, lease, renewed.held.valid_until()).await;
    if entry.keys.lease() != lease {
        // An extend moved the keys to a new lease meanwhile: the answer
        // was about the old one. Renew the new one soon.
        return Outcome::Failed {
            confirmed: 1,
            error: "an extend moved the lock to a new lease during the keep-alive".to_owned(),
        };
    }
    match kept {
        Ok(Some((sent, ttl))) => Outcome::Confirmed {
            lease: store.lease(sent, ttl),
            confirmed: 1,
        },
        Ok(None) => Outcome::Gone("the lease expired or a key of the lock is gone"),
        Err(error) => Outcome::Failed {
            confirmed: 0,
            error: error.to_string(),
        },
    }
}

/// One keep-alive of the lease and a check of the keys, at once, bounded by
/// the request timeout and the validity. `Ok(None)`: the lock is gone.
async fn keep_alive(
    store: &Cluster,
    entry: &Entry,
    lease: i64,
    held_until: Instant,
) -> Result<Option<(Instant, Duration)>> {
    let deadline = (Instant::now() + store.state.request_timeout).min(held_until);
    let mut keeper = entry.keeper.lock().await;
    if keeper.as_ref().is_none_or(|k| k.lease() != lease) {
        let opened = tokio::time::timeout_at(deadline, Keeper::open(store, lease)).await;
        *keeper = Some(
            opened.map_err(|_| store.unreachable(NodeErrorKind::Timeout(store.state.request_timeout)))??,
        );
    }
    let keys = async {
        let mut client = store.client().await?;
        let txn = Txn::new().when(entry.keys.all_present());
        store.call_by(deadline, client.txn(txn)).await
    };
    let Some(kept) = keeper.as_mut() else {
        return Ok(None);
    };
    let (kept, keys) = tokio::join!(kept.renew(store, deadline), keys);
    let kept = match kept {
        Ok(kept) => kept,
        Err(error) => {
            // A late answer on this stream must not be taken for the next.
            *keeper = None;
            return Err(error);
        }
    };
    match (kept, keys?.succeeded()) {
        (KeptAlive::Alive { sent, ttl }, true) => Ok(Some((sent, ttl))),
        _ => Ok(None),
    }
}
