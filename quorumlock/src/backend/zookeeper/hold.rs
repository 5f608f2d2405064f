//! A guard's ZooKeeper lock: the ensemble as a [`cluster::Store`], the
//! guard of a fresh lock, and its end at its ttl when it is not renewed.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::Ensemble;
use super::heartbeat::ZooKeeperRound;
use super::nodes::{Nodes, give_back};
use crate::backend::cluster::{self, ClientState, ClusterHold, Lock};
use crate::error::Result;
use crate::lock::guard::Guard;
use crate::lock::lease::Lease;
use crate::lock::state::Held;
use crate::metrics::Loss;
use crate::tasks::BackgroundWork;

impl cluster::Store for Ensemble {
    type Kept = Nodes;
    type Renewed = Arc<Nodes>;

    /// A lock that is not renewed ends at its validity: its nodes would
    /// otherwise live as long as the session, which the other locks of the
    /// client keep alive.
    fn guard(self: &Arc<Self>, held: Held, nodes: Nodes, renew: bool, min_validity: Duration) -> Guard {
        let (held, nodes) = (Arc::new(held), Arc::new(nodes));
        let renewal = if renew {
            let round = || ZooKeeperRound(Arc::clone(self));
            Some(self.state.renewal.register(&held, Arc::clone(&nodes), round))
        } else {
            end_at_validity(self, &held, &nodes);
            None
        };
        ClusterHold::guard(self, held, nodes, renewal, min_validity)
    }

    fn state(&self) -> &ClientState<Nodes, Arc<Nodes>> {
        &self.state
    }

    /// One heartbeat for this lock (a `sync` through the leader and a read
    /// of its nodes): valid for `ttl` (within what the session vouches for)
    /// from the heartbeat's sending.
    fn renew_now(lock: Lock<'_, Self>, ttl: Duration) -> BoxFuture<'_, Result<Lease>> {
        let store = lock.store;
        async move {
            let client = store.client().await?;
            let sent = Instant::now();
            let deadline = sent + store.state.request_timeout;
            let (synced, present) = tokio::join!(
                store.call_by(deadline, client.sync("/")),
                lock.kept.all_present(store, &client, deadline)
            );
            synced.map_err(|e| store.failed(&e))?;
            if !present.map_err(|e| store.failed(&e))? {
                return Err(store.state.lost());
            }
            Ok(store.lease(&client, sent, ttl))
        }
        .boxed()
    }

    fn give_back(lock: Lock<'_, Self>) -> BoxFuture<'_, Result<Option<Instant>>> {
        async move { give_back(lock.store, lock.held, lock.kept).await.map(|()| None) }.boxed()
    }

    /// The session, which deletes any node of it left.
    fn close(&self) -> BoxFuture<'_, ()> {
        async {
            self.session.lock().await.take();
        }
        .boxed()
    }
}

/// Gives a lock that is not renewed back when its validity (moved on by
/// each extend) has passed, unless it was given back before.
fn end_at_validity(store: &Arc<Ensemble>, held: &Arc<Held>, nodes: &Arc<Nodes>) {
    let (task_store, held, nodes) = (Arc::clone(store), Arc::clone(held), Arc::clone(nodes));
    store
        .state
        .tasks
        .spawn_if_running(BackgroundWork::Release, async move {
            loop {
                let until = held.valid_until();
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    () = task_store.state.tasks.closing().cancelled() => return,
                }
                if held.is_released() {
                    return;
                }
                if Instant::now() >= held.valid_until() {
                    held.mark_lost(Loss::ValidityRanOut);
                    if held.claim_release() {
                        cluster::Store::give_back_in_background(&task_store, &held, &nodes);
                    }
                    return;
                }
            }
        });
}
