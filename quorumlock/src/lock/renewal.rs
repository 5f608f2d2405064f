//! The renewal loop: one task per client renews every held lock, on any
//! store, and tells a holder when its lock is lost.
//!
//! - The task sleeps until the earliest renewal is due, then hands every lock
//!   due (and those due soon, see [`Scan::sort`]) to its store's [`Round`]
//!   at once: a store renews them in one batch (Redlock: one script call per
//!   node; ZooKeeper: one `sync` for the session), or each on its own
//!   concurrently (etcd: one keep-alive per lease);
//! - a lock counts as renewed only from the instant its round was sent, as
//!   the store's [`Lease`] says; a round that failed is tried again after the
//!   store's retry delay while the validity lasts;
//! - loss (the store says the lock is gone, or its validity ran out
//!   unconfirmed) fires the holder's signal once, ends the lock's renewal
//!   and gives it back in the background;
//! - the signal never depends on this task: [`Held::lost`] also waits on a
//!   local timer at `valid_until`, so a holder learns of the loss on time
//!   even when every renewal hangs.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::lease::Lease;
use super::registry::Registry;
use super::state::Held;
use crate::config::{RENEW_DIVISOR, WATCHDOG_LINGER};
use crate::metrics::{self, Loss};
use crate::tasks::{BackgroundWork, Tasks};

/// One lock in a renewal: its state, and what its store keeps of it (`K`:
/// nothing on Redis, the keys on etcd, the nodes on ZooKeeper).
#[derive(Clone, Debug)]
pub(crate) struct Renewed<K> {
    pub(crate) held: Arc<Held>,
    pub(crate) kept: K,
}

/// What a store's round found for one lock.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The store confirmed the lock: it is ours for `lease`, with
    /// `confirmed` members behind it.
    Confirmed { lease: Lease, confirmed: usize },
    /// The store says the lock is gone (another owner, an expired lease or
    /// session, a deleted key).
    Gone(&'static str),
    /// No confirmation: tried again after the store's retry delay, while
    /// the validity lasts. `confirmed` members did confirm.
    Failed { confirmed: usize, error: String },
}

/// A store's half of renewal.
pub(crate) trait Round: Send + Sync + 'static {
    /// What the store keeps of each renewed lock.
    type Kept: Clone + Send + Sync + 'static;

    /// The client's background work: the task is tracked there, and ends
    /// when the client closes.
    fn tasks(&self) -> &Arc<Tasks>;

    /// How soon a round that failed is tried again.
    fn retry_delay(&self) -> Duration;

    /// Renews `due` at once; one outcome per lock, in order. Every lock of
    /// `due` was taken into the round ([`Held::start_renewal`]); the loop
    /// ends the round for each after this returns.
    fn renew(&self, due: &[Renewed<Self::Kept>]) -> impl Future<Output = Vec<Outcome>> + Send;

    /// Gives a lost lock back (`held`, with what the store keeps of it), as
    /// tracked background work.
    fn give_back(&self, held: &Arc<Held>, kept: &Self::Kept);
}

/// The registry of renewed locks and the handle on the one renewal task.
#[derive(Debug)]
pub(crate) struct Renewal<K> {
    state: Mutex<State<K>>,
    wake: Notify,
}

#[derive(Debug)]
struct State<K> {
    locks: Registry<Renewed<K>>,
    /// The renewal task, while it runs. One whose runtime shut down counts
    /// as finished, so that the next lock taken on another runtime starts a
    /// new one instead of waiting on a task that will never run again.
    task: Option<JoinHandle<()>>,
    /// When the sleeping task wakes next (`None`: it is about to scan the
    /// registry anyway). A new lock wakes it only if it needs it sooner, so
    /// that taking a lock costs no wake-up and no scan of all locks.
    wake_at: Option<Instant>,
    /// Since when the registry has been empty.
    idle_since: Option<Instant>,
}

/// What one scan of the registry found.
struct Scan<K> {
    /// Locks to renew now: those due, and those due soon that come along.
    due: Vec<(u64, Renewed<K>)>,
    /// Locks due within the batching window, renewed only with due ones.
    early: Vec<(u64, Renewed<K>)>,
    /// Locks whose validity ran out unconfirmed, or that were lost.
    expired: Vec<Renewed<K>>,
    /// When to scan again, if nothing wakes the task sooner.
    wake_at: Option<Instant>,
}

impl<K> Default for Renewal<K> {
    fn default() -> Self {
        Renewal {
            state: Mutex::new(State {
                locks: Registry::default(),
                task: None,
                wake_at: None,
                idle_since: None,
            }),
            wake: Notify::new(),
        }
    }
}

impl<K: Clone + Send + Sync + 'static> Renewal<K> {
    fn state(&self) -> MutexGuard<'_, State<K>> {
        // Plain data, valid after a panic in another thread.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts renewing `held`; spawns the renewal task with the round that
    /// `round` makes if it is not running. Returns the id to unregister
    /// with. Must run inside a Tokio runtime.
    pub(crate) fn register<R: Round<Kept = K>>(
        self: &Arc<Self>,
        held: &Arc<Held>,
        kept: K,
        round: impl FnOnce() -> R,
    ) -> u64 {
        let mut state = self.state();
        let renewed = Renewed {
            held: Arc::clone(held),
            kept,
        };
        let id = state.locks.insert(renewed);
        if state.task.as_ref().is_some_and(|task| !task.is_finished()) {
            let needed = held.next_renewal().map_or(held.valid_until(), |(at, _)| at);
            if state.wake_at.is_some_and(|wake| needed < wake) {
                self.wake.notify_one();
            }
        } else {
            // Woken by nothing yet: it scans the registry first.
            state.wake_at = None;
            state.idle_since = None;
            let round = round();
            let tasks = Arc::clone(round.tasks());
            state.task = Some(tasks.spawn(BackgroundWork::Renewal, run(Arc::clone(self), round)));
        }
        id
    }

    /// Stops renewing lock `id` (released or dropped). The task notices at
    /// its next wake-up (and ends [`WATCHDOG_LINGER`] after the last lock).
    pub(crate) fn unregister(&self, id: u64) {
        self.state().locks.remove(id);
    }

    /// Sorts the registered locks at `now` into due, early and expired,
    /// dropping released and expired ones; `None` when the task is to end
    /// (the client is closing, or no lock was left for
    /// [`WATCHDOG_LINGER`]).
    fn scan(&self, now: Instant, closing: bool) -> Option<Scan<K>> {
        let mut state = self.state();
        if closing {
            state.locks.take_all();
            state.task = None;
            return None;
        }
        let mut scan = Scan {
            due: Vec::new(),
            early: Vec::new(),
            expired: Vec::new(),
            wake_at: None,
        };
        if state.locks.is_empty() {
            let end = *state.idle_since.get_or_insert(now) + WATCHDOG_LINGER;
            if end <= now {
                state.task = None;
                return None;
            }
            // Sleep until then, unless a new lock needs a renewal sooner
            // and wakes us.
            scan.wake_at = Some(end);
        } else {
            state.idle_since = None;
        }
        state
            .locks
            .retain_with_ids(|id, renewed| scan.sort(id, renewed, now));
        state.wake_at = if scan.due.is_empty() && scan.expired.is_empty() {
            scan.wake_at
        } else {
            None
        };
        Some(scan)
    }
}

impl<K> Scan<K> {
    /// Files lock `id` by what it needs at `now`; `false` when it leaves the
    /// registry (released, or expired and filed as such).
    fn sort(&mut self, id: u64, renewed: &Renewed<K>, now: Instant) -> bool
    where
        K: Clone,
    {
        let held = &renewed.held;
        if held.is_released() {
            return false;
        }
        let valid_until = held.valid_until();
        if held.is_lost() || valid_until <= now {
            self.expired.push(renewed.clone());
            return false;
        }
        let mut wake = valid_until;
        if let Some((renew_at, retrying)) = held.next_renewal() {
            // A round comes when the earliest renewal is due, and takes along
            // every regular renewal due within the next half period: locks
            // acquired at scattered times are renewed together (a little
            // early, which is harmless, and never late), and the next round
            // is at least half a period away, so the number of rounds, and of
            // round trips, does not grow with the number of locks. A lone
            // lock is renewed exactly every ttl/3. Retries keep their exact
            // time.
            let window = if retrying {
                Duration::ZERO
            } else {
                held.ttl() / (RENEW_DIVISOR * 2)
            };
            if renew_at <= now {
                self.due.push((id, renewed.clone()));
            } else {
                if renew_at <= now + window {
                    self.early.push((id, renewed.clone()));
                }
                wake = wake.min(renew_at);
            }
        }
        self.wake_at = Some(self.wake_at.map_or(wake, |w| w.min(wake)));
        true
    }
}

/// The renewal task: sleeps until the next renewal or expiry, hands every
/// due lock to one round, and ends when no lock was left to renew for
/// [`WATCHDOG_LINGER`] or the client shuts down (which releases the locks
/// itself).
async fn run<R: Round>(renewal: Arc<Renewal<R::Kept>>, round: R) {
    let closing = round.tasks().closing().clone();
    while let Some(mut scan) = renewal.scan(Instant::now(), closing.is_cancelled()) {
        for renewed in &scan.expired {
            lose(
                &round,
                renewed,
                Loss::ValidityRanOut,
                "the validity ran out before a renewal was confirmed",
            );
        }
        if !scan.due.is_empty() {
            scan.due.append(&mut scan.early);
            scan.due.retain(|(_, renewed)| renewed.held.start_renewal());
            if !scan.due.is_empty() {
                renew(&renewal, &round, scan.due).await;
            }
            continue;
        }
        if let Some(at) = scan.wake_at {
            tokio::select! {
                // Ready branches are taken in the order written: a simulated run
                // replays the same for the same seed (the `sim` feature).
                biased;
                () = tokio::time::sleep_until(at) => {}
                () = renewal.wake.notified() => {}
                () = closing.cancelled() => {}
            }
        }
    }
}

/// One round for `due`, and each lock's outcome applied.
async fn renew<R: Round>(renewal: &Renewal<R::Kept>, round: &R, due: Vec<(u64, Renewed<R::Kept>)>) {
    let (ids, due): (Vec<u64>, Vec<Renewed<R::Kept>>) = due.into_iter().unzip();
    let outcomes = round.renew(&due).await;
    // Every member has been handed the round (requests still pending run
    // in the background): releases may go now.
    for renewed in &due {
        renewed.held.end_renewal();
    }
    for ((id, renewed), outcome) in ids.into_iter().zip(&due).zip(outcomes) {
        apply(renewal, round, id, renewed, outcome);
    }
}

/// A lock's outcome of one round.
fn apply<R: Round>(
    renewal: &Renewal<R::Kept>,
    round: &R,
    id: u64,
    renewed: &Renewed<R::Kept>,
    outcome: Outcome,
) {
    let held = &renewed.held;
    let (cause, why) = match outcome {
        Outcome::Confirmed { lease, confirmed } => {
            if held.confirm(&lease, confirmed) {
                held.count_renewal();
                tracing::trace!(resources = ?held.resources.names(), confirmed, "lock renewed");
                return;
            }
            (
                Loss::ValidityRanOut,
                "the validity ran out while the renewal was confirmed",
            )
        }
        Outcome::Gone(why) => {
            metrics::renewal(false);
            (Loss::Taken, why)
        }
        Outcome::Failed { confirmed, error } => {
            metrics::renewal(false);
            if Instant::now() < held.valid_until() {
                // Several tries fit in the remaining validity (the ttl is
                // far larger than a store's retry delay), without
                // hammering a struggling store.
                held.retry_at(Instant::now() + round.retry_delay(), confirmed);
                tracing::debug!(resources = ?held.resources.names(), %error, "renewal not confirmed, retrying");
                return;
            }
            tracing::debug!(resources = ?held.resources.names(), %error, "last renewal failed");
            (
                Loss::ValidityRanOut,
                "no renewal was confirmed within the validity",
            )
        }
    };
    renewal.unregister(id);
    lose(round, renewed, cause, why);
}

/// Fires the holder's loss signal (once) and gives the lock back, best
/// effort: some of it may still be on the store. Sent even when the
/// holder's local timer fired the signal first.
fn lose<R: Round>(round: &R, renewed: &Renewed<R::Kept>, cause: Loss, why: &'static str) {
    if renewed.held.mark_lost(cause) {
        tracing::warn!(resources = ?renewed.held.resources.names(), why, "lock lost");
    }
    if renewed.held.claim_release() {
        round.give_back(&renewed.held, &renewed.kept);
    }
}
