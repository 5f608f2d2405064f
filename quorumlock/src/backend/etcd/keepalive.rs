//! One keep-alive task per client: renews the lease of every held etcd lock
//! (the shared watchdog's role on etcd), and tells a holder when its lock
//! is lost.
//!
//! - A round sends each due lease one keep-alive and checks, in the same
//!   breath, that every key of the lock still exists as created; the
//!   rounds of all due locks run at once;
//! - a lock counts as renewed from the instant its keep-alive was sent,
//!   with the ttl the cluster answered, so its validity never outlasts the
//!   lease on the cluster (within the drift allowance);
//! - loss (the lease expired, a key is gone, or the validity ran out before
//!   a keep-alive was answered) fires the holder's signal once and gives
//!   the lock back; the signal never depends on this task ([`Held::lost`]
//!   also waits on a local timer).

use std::sync::{Arc, Mutex, MutexGuard};

use etcd_client::Txn;
use futures::future::join_all;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Store;
use super::keeper::{Keeper, KeptAlive};
use super::lease::{Keys, give_back_in_background};
use crate::config::WATCHDOG_LINGER;
use crate::config::etcd::ETCD_RENEW_RETRY;
use crate::error::{NodeErrorKind, Result};
use crate::lock::registry::Registry;
use crate::lock::state::Held;
use crate::metrics::{self, Loss};
use crate::tasks::BackgroundWork;

/// The registry of renewed etcd locks and the handle on the task.
#[derive(Debug, Default)]
pub(crate) struct KeepAlive {
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    locks: Registry<Arc<Entry>>,
    task: Option<JoinHandle<()>>,
}

/// What a scan of the registry found.
struct Due {
    /// The locks to renew now, with their ids.
    locks: Vec<(u64, Arc<Entry>)>,
    /// When the next of the others is due.
    next: Option<Instant>,
}

/// One renewed lock: its state, keys, and its lease's keep-alive stream.
struct Entry {
    held: Arc<Held>,
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

/// Registers a lock for renewal, starting the task if it is not running.
pub(crate) fn register(store: &Arc<Store>, held: &Arc<Held>, keys: &Arc<Keys>) -> u64 {
    let entry = Arc::new(Entry {
        held: Arc::clone(held),
        keys: Arc::clone(keys),
        keeper: tokio::sync::Mutex::new(None),
    });
    let mut state = store.keepalive.state();
    let id = state.locks.insert(entry);
    if state.task.as_ref().is_none_or(JoinHandle::is_finished) {
        let task_store = Arc::clone(store);
        state.task = Some(store.tasks.spawn(BackgroundWork::Renewal, run(task_store)));
    }
    drop(state);
    store.keepalive.wake.notify_one();
    id
}

impl KeepAlive {
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
    let keepalive = &store.keepalive;
    let closing = store.tasks.closing().clone();
    loop {
        let woken = keepalive.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let Some(Due { locks: due, next }) = keepalive.scan(Instant::now()) else {
            tokio::select! {
                () = &mut woken => continue,
                () = tokio::time::sleep(WATCHDOG_LINGER) => {}
                () = closing.cancelled() => return,
            }
            let mut state = keepalive.state();
            if state.locks.is_empty() {
                state.task = None;
                return;
            }
            continue;
        };
        if !due.is_empty() {
            // Then scan again: the renewed locks' next rounds are due later.
            join_all(due.into_iter().map(|(id, entry)| renew(&store, id, entry))).await;
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

/// One renewal round of one lock.
async fn renew(store: &Arc<Store>, id: u64, entry: Arc<Entry>) {
    let held = &entry.held;
    if !held.start_renewal() {
        return;
    }
    let lease = entry.keys.lease();
    let outcome = round(store, &entry, lease).await;
    held.end_renewal();
    let moved = entry.keys.lease() != lease;
    match outcome {
        // An extend moved the keys to a new lease meanwhile: the answer
        // was about the old one. Renew the new one soon.
        _ if moved => held.retry_at(Instant::now() + ETCD_RENEW_RETRY, 1),
        Ok(Some((sent, ttl))) => {
            if held.confirm(&store.lease(sent, ttl), 1) {
                held.count_renewal();
            } else {
                lose(
                    store,
                    id,
                    &entry,
                    Loss::ValidityRanOut,
                    "the validity ran out before the keep-alive was answered",
                );
            }
        }
        Ok(None) => lose(
            store,
            id,
            &entry,
            Loss::Taken,
            "the lease expired or a key of the lock is gone",
        ),
        Err(error) if Instant::now() >= held.valid_until() => {
            tracing::debug!(%error, "last etcd keep-alive failed");
            lose(
                store,
                id,
                &entry,
                Loss::ValidityRanOut,
                "no keep-alive was answered within the validity",
            );
        }
        Err(error) => {
            tracing::debug!(%error, "etcd keep-alive failed; trying again");
            metrics::renewal(false);
            held.retry_at(Instant::now() + ETCD_RENEW_RETRY, 0);
        }
    }
}

/// One keep-alive of the lease and a check of the keys, at once, bounded by
/// the request timeout and the validity. `Ok(None)`: the lock is gone.
async fn round(store: &Store, entry: &Entry, lease: i64) -> Result<Option<(Instant, std::time::Duration)>> {
    let deadline = (Instant::now() + store.request_timeout).min(entry.held.valid_until());
    let mut keeper = entry.keeper.lock().await;
    if keeper.as_ref().is_none_or(|k| k.lease() != lease) {
        let opened = tokio::time::timeout_at(deadline, Keeper::open(store, lease)).await;
        *keeper =
            Some(opened.map_err(|_| store.unreachable(NodeErrorKind::Timeout(store.request_timeout)))??);
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

/// The lock is lost: fires the signal, stops renewing it, gives it back.
fn lose(store: &Arc<Store>, id: u64, entry: &Entry, cause: Loss, why: &str) {
    store.keepalive.unregister(id);
    if entry.held.mark_lost(cause) {
        tracing::warn!(resources = ?entry.held.resources.names(), why, "etcd lock lost");
    }
    if entry.held.claim_release() {
        give_back_in_background(store, &entry.held, &entry.keys);
    }
}
