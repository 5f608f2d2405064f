//! One heartbeat task per client: renews every held ZooKeeper lock of the
//! client in one round (the shared watchdog's role on ZooKeeper: one
//! session keeps them all), and tells a holder when its lock is lost.
//!
//! - A round sends a `sync` (which goes through the leader, so a server cut
//!   off from it cannot answer) and, behind it on the same connection, a
//!   read of every due lock's nodes; one round serves every lock due;
//! - a lock counts as renewed from the instant the round was sent, for the
//!   share of the session timeout a heartbeat vouches for
//!   ([`crate::config::zookeeper::ZK_TRUSTED_SHARE`]) and never more than its ttl;
//! - loss (the session expired, a node is gone, or the validity ran out
//!   before a round was answered) fires the holder's signal once and gives
//!   the lock back; the signal never depends on this task ([`Held::lost`]
//!   also waits on a local timer).

use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::join_all;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::nodes::{Nodes, give_back_in_background};
use super::{Store, ZkResult};
use crate::config::WATCHDOG_LINGER;
use crate::config::zookeeper::ZK_RETRY;
use crate::lock::registry::Registry;
use crate::lock::state::Held;
use crate::metrics::{self, Loss};
use crate::tasks::BackgroundWork;

/// The registry of renewed ZooKeeper locks and the handle on the task.
#[derive(Debug, Default)]
pub(crate) struct Heartbeat {
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    locks: Registry<Arc<Entry>>,
    task: Option<JoinHandle<()>>,
}

/// One renewed lock: its state and its nodes.
#[derive(Debug)]
struct Entry {
    held: Arc<Held>,
    nodes: Arc<Nodes>,
}

/// What a scan of the registry found.
struct Due {
    /// The locks to renew now, with their ids.
    locks: Vec<(u64, Arc<Entry>)>,
    /// When the next of the others is due.
    next: Option<Instant>,
}

/// Registers a lock for renewal, starting the task if it is not running.
pub(crate) fn register(store: &Arc<Store>, held: &Arc<Held>, nodes: &Arc<Nodes>) -> u64 {
    let entry = Arc::new(Entry {
        held: Arc::clone(held),
        nodes: Arc::clone(nodes),
    });
    let mut state = store.heartbeat.state();
    let id = state.locks.insert(entry);
    if state.task.as_ref().is_none_or(JoinHandle::is_finished) {
        let task_store = Arc::clone(store);
        state.task = Some(store.tasks.spawn(BackgroundWork::Renewal, run(task_store)));
    }
    drop(state);
    store.heartbeat.wake.notify_one();
    id
}

impl Heartbeat {
    fn state(&self) -> MutexGuard<'_, State> {
        // Plain data, valid after a panic in another thread.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.state().locks.remove(id);
    }

    /// The locks due now and when the next one is due; `None` when there
    /// is no lock to renew.
    fn scan(&self, now: Instant) -> Option<Due> {
        let state = self.state();
        if state.locks.is_empty() {
            return None;
        }
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (id, entry) in state.locks.iter() {
            match entry.held.next_renewal() {
                Some((at, _)) if at <= now => due.push((id, Arc::clone(entry))),
                Some((at, _)) => next = Some(next.map_or(at, |n| n.min(at))),
                // A hold limit was reached: the lock runs out at its validity.
                None => {}
            }
        }
        Some(Due { locks: due, next })
    }
}

/// The task: renews what is due, sleeps until the next is due or a lock is
/// added; ends after [`WATCHDOG_LINGER`] without locks, or at shutdown.
async fn run(store: Arc<Store>) {
    let heartbeat = &store.heartbeat;
    let closing = store.tasks.closing().clone();
    loop {
        let woken = heartbeat.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let Some(Due { locks: due, next }) = heartbeat.scan(Instant::now()) else {
            tokio::select! {
                () = &mut woken => continue,
                () = tokio::time::sleep(WATCHDOG_LINGER) => {}
                () = closing.cancelled() => return,
            }
            let mut state = heartbeat.state();
            if state.locks.is_empty() {
                state.task = None;
                return;
            }
            continue;
        };
        if !due.is_empty() {
            // Then scan again: the renewed locks' next rounds are due later.
            round(&store, due).await;
            continue;
        }
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut woken => {}
            () = sleep => {}
            () = closing.cancelled() => return,
        }
    }
}

/// What one round found for one lock.
enum Outcome {
    /// Every node is there, through a session confirmed by the leader.
    Present,
    /// A node of the lock is gone, or the session that held it.
    Gone(&'static str),
    /// No answer: try again soon, while the validity lasts.
    Failed(String),
}

/// One round for the `due` locks: a `sync`, then a read of each lock's
/// nodes, all sent at once.
async fn round(store: &Arc<Store>, due: Vec<(u64, Arc<Entry>)>) {
    let due: Vec<_> = due.into_iter().filter(|(_, e)| e.held.start_renewal()).collect();
    if due.is_empty() {
        return;
    }
    let sent = Instant::now();
    let (client, outcomes) = match store.client().await {
        Err(error) => (
            None,
            due.iter().map(|_| Outcome::Failed(error.to_string())).collect(),
        ),
        Ok(client) => {
            let deadline = sent + store.request_timeout;
            let reads = join_all(
                due.iter()
                    .map(|(_, e)| e.nodes.all_present(store, &client, deadline)),
            );
            let (synced, reads) = tokio::join!(store.call_by(deadline, client.sync("/")), reads);
            let outcomes: Vec<Outcome> = reads.into_iter().map(|read| outcome(&synced, read)).collect();
            (Some(client), outcomes)
        }
    };
    for ((id, entry), outcome) in due.iter().zip(outcomes) {
        let held = &entry.held;
        held.end_renewal();
        let outcome = match (outcome, &client) {
            (Outcome::Present, Some(client)) if !held.confirm(&store.lease(client, sent, held.ttl()), 1) => {
                Outcome::Gone("the validity ran out before the heartbeat was answered")
            }
            (outcome, _) => outcome,
        };
        match outcome {
            Outcome::Present => held.count_renewal(),
            Outcome::Gone(why) => lose(store, *id, entry, Loss::Taken, why),
            Outcome::Failed(error) if Instant::now() >= held.valid_until() => {
                tracing::debug!(%error, "last ZooKeeper heartbeat failed");
                lose(
                    store,
                    *id,
                    entry,
                    Loss::ValidityRanOut,
                    "no heartbeat was answered within the validity",
                );
            }
            Outcome::Failed(error) => {
                tracing::debug!(%error, "ZooKeeper heartbeat failed; trying again");
                metrics::renewal(false);
                held.retry_at(Instant::now() + ZK_RETRY, 0);
            }
        }
    }
}

/// One lock's outcome from the round's `sync` and the read of its nodes.
fn outcome(synced: &ZkResult<()>, read: ZkResult<bool>) -> Outcome {
    use zookeeper_client::Error::SessionExpired;
    match (synced, read) {
        (Err(SessionExpired), _) | (_, Err(SessionExpired)) => Outcome::Gone("the session expired"),
        (Ok(()), Ok(true)) => Outcome::Present,
        (Ok(()), Ok(false)) => Outcome::Gone("a node of the lock is gone"),
        (Err(error), _) => Outcome::Failed(error.to_string()),
        (_, Err(error)) => Outcome::Failed(error.to_string()),
    }
}

/// The lock is lost: fires the signal, stops renewing it, gives it back.
fn lose(store: &Arc<Store>, id: u64, entry: &Entry, cause: Loss, why: &str) {
    store.heartbeat.unregister(id);
    if entry.held.mark_lost(cause) {
        tracing::warn!(resources = ?entry.held.resources.names(), why, "ZooKeeper lock lost");
    }
    if entry.held.claim_release() {
        give_back_in_background(store, &entry.held, &entry.nodes);
    }
}
