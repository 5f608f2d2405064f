//! A guard's ZooKeeper lock: its registrations with the store, its end at
//! its ttl when it is not renewed, and extend.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::future::{BoxFuture, FutureExt};

use super::Ensemble;
use super::heartbeat::ZooKeeperRound;
use super::nodes::{Nodes, give_back, give_back_in_background};
use crate::backend::cluster;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::hold::Hold;
use crate::lock::report::ReleaseReport;
use crate::lock::state::Held;
use crate::metrics::Loss;
use crate::tasks::BackgroundWork;

/// What a guard of a ZooKeeper lock holds besides the lock's state.
#[derive(Debug)]
pub(crate) struct ZooKeeperHold {
    pub(crate) store: Arc<Ensemble>,
    pub(crate) nodes: Arc<Nodes>,
    /// Registration with the store's holders, for a shutdown.
    holder: Option<u64>,
    /// Registration with the heartbeat task, when auto-renewed.
    renewal: Option<u64>,
}

/// The guard of a fresh lock, registered with the store, and with its
/// heartbeat task when `renew`. A lock that is not renewed ends at its
/// validity: its nodes would otherwise live as long as the session, which
/// the other locks of the client keep alive.
pub(crate) fn guard(
    store: &Arc<Ensemble>,
    (held, nodes): (Held, Nodes),
    renew: bool,
    min_validity: Duration,
) -> Guard {
    let (held, nodes) = (Arc::new(held), Arc::new(nodes));
    let renewal = if renew {
        Some(
            store
                .renewal
                .register(&held, Arc::clone(&nodes), || ZooKeeperRound(Arc::clone(store))),
        )
    } else {
        end_at_validity(store, &held, &nodes);
        None
    };
    let hold = ZooKeeperHold {
        holder: Some(store.holders.insert(&held, Arc::clone(&nodes))),
        renewal,
        store: Arc::clone(store),
        nodes,
    };
    Guard::new(held, Box::new(hold), min_validity)
}

impl ZooKeeperHold {
    /// One heartbeat for this lock (a `sync` through the leader and a read
    /// of its nodes), then the lock valid for `ttl` (within what the session
    /// vouches for) from the heartbeat's sending.
    async fn extend_session(&self, held: &Held, ttl: Duration, min_validity: Duration) -> Result<()> {
        let store = &self.store;
        let ttl = store.check_ttl(ttl, min_validity)?;
        if store.is_closed() {
            return Err(Error::Closed);
        }
        if !held.is_held() {
            return Err(store.lost());
        }
        let client = store.client().await?;
        let sent = Instant::now();
        let deadline = sent + store.request_timeout;
        let (synced, present) = tokio::join!(
            store.call_by(deadline, client.sync("/")),
            self.nodes.all_present(store, &client, deadline)
        );
        synced.map_err(|e| store.failed(&e))?;
        if !present.map_err(|e| store.failed(&e))? {
            held.mark_lost(Loss::Taken);
            return Err(store.lost());
        }
        let lease = store.lease(&client, sent, ttl);
        lease.left(min_validity)?;
        if !held.confirm(&lease, 1) {
            return Err(store.lost());
        }
        Ok(())
    }
}

impl Hold for ZooKeeperHold {
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
        self.extend_session(held, ttl, min_validity).boxed()
    }

    fn release<'a>(&'a self, held: &'a Held, claimed: bool) -> BoxFuture<'a, Result<ReleaseReport>> {
        let given = async move { give_back(&self.store, held, &self.nodes).await.map(|()| None) };
        cluster::release(claimed, given).boxed()
    }

    fn release_in_background(&self, held: &Arc<Held>) {
        give_back_in_background(&self.store, held, &self.nodes);
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

/// Gives a lock that is not renewed back when its validity (moved on by
/// each extend) has passed, unless it was given back before.
fn end_at_validity(store: &Arc<Ensemble>, held: &Arc<Held>, nodes: &Arc<Nodes>) {
    let (task_store, held, nodes) = (Arc::clone(store), Arc::clone(held), Arc::clone(nodes));
    store.tasks.spawn_if_running(BackgroundWork::Release, async move {
        loop {
            let until = held.valid_until();
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = task_store.tasks.closing().cancelled() => return,
            }
            if held.is_released() {
                return;
            }
            if Instant::now() >= held.valid_until() {
                held.mark_lost(Loss::ValidityRanOut);
                if held.claim_release() {
                    give_back_in_background(&task_store, &held, &nodes);
                }
                return;
            }
        }
    });
}
