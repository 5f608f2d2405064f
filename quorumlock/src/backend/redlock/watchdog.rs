//! The shared watchdog: one task per client renews every held lock in
//! batches, and tells a holder when its lock is lost.
//!
//! - Renewal is owner-checked and sends each node one script per tick for
//!   all due locks, so round trips per tick are O(nodes), not O(locks);
//! - a lock counts as renewed only when a majority confirmed before its
//!   validity ended; the new validity is measured from the tick's start;
//! - loss (validity ran out unconfirmed, or a majority reports another token)
//!   fires the holder's signal once, stops renewal and releases our token;
//! - the signal never depends on this task: [`Held::lost`] also waits on a
//!   local timer at `valid_until`, so a holder learns of the loss on time
//!   even when every renewal request hangs.

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::release::release_in_background;
use crate::lock::registry::Registry;
use crate::lock::state::Held;
use tracing::Instrument;
use tracing::field::Empty;

use crate::backend::redlock::quorum::{Quorum, Tally};
use crate::backend::redlock::wire::renew::{Renew, RenewItem, RenewStatus};
use crate::config::{RENEW_DIVISOR, WATCHDOG_LINGER};
use crate::metrics::{self, Loss};
use crate::tasks::BackgroundWork;

/// The registry of renewed locks and the handle on the one renewal task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    quorum: Arc<Quorum>,
    /// Renewals re-create our key where a node lost it.
    heal: bool,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    locks: Registry<Arc<Held>>,
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
#[derive(Default)]
struct Scan {
    /// Locks to renew now: those due, and those due soon that come along.
    due: Vec<Arc<Held>>,
    /// Locks due within the batching window, renewed only with due ones.
    early: Vec<Arc<Held>>,
    /// Locks whose validity ran out unconfirmed, or that were lost.
    expired: Vec<Arc<Held>>,
    /// When to scan again, if nothing wakes the task sooner.
    wake_at: Option<Instant>,
}

impl Watchdog {
    pub(crate) fn new(quorum: Arc<Quorum>, heal: bool) -> Self {
        Watchdog {
            quorum,
            heal,
            state: Mutex::default(),
            wake: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
    fn scan(&self, now: Instant, closing: &CancellationToken) -> Option<Scan> {
        let mut state = self.state();
        if closing.is_cancelled() {
            state.locks.take_all();
            state.task = None;
            return None;
        }
        let mut scan = Scan::default();
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
        state.locks.retain(|held| scan.sort(held, now));
        state.wake_at = if scan.due.is_empty() && scan.expired.is_empty() {
            scan.wake_at
        } else {
            None
        };
        Some(scan)
    }
}

impl Scan {
    /// Files `held` by what it needs at `now`; `false` when it leaves the
    /// registry (released, or expired and filed as such).
    fn sort(&mut self, held: &Arc<Held>, now: Instant) -> bool {
        if held.is_released() {
            return false;
        }
        let valid_until = held.valid_until();
        if held.is_lost() || valid_until <= now {
            self.expired.push(Arc::clone(held));
            return false;
        }
        let mut wake = valid_until;
        if let Some((renew_at, retrying)) = held.next_renewal() {
            // A tick comes when the earliest renewal is due, and takes along
            // every regular renewal due within the next half period: locks
            // acquired at scattered times are renewed together (a little
            // early, which is harmless, and never late), and the next tick
            // is at least half a period away, so the number of ticks, and of
            // round trips, does not grow with the number of locks. A lone
            // lock is renewed exactly every ttl/3. Retries keep their exact
            // time.
            let window = if retrying {
                Duration::ZERO
            } else {
                held.ttl() / (RENEW_DIVISOR * 2)
            };
            if renew_at <= now {
                self.due.push(Arc::clone(held));
            } else {
                if renew_at <= now + window {
                    self.early.push(Arc::clone(held));
                }
                wake = wake.min(renew_at);
            }
        }
        self.wake_at = Some(self.wake_at.map_or(wake, |w| w.min(wake)));
        true
    }
}

/// Starts renewing `held`; spawns the client's watchdog task if it is not
/// running. Returns the id to unregister with. Must run inside a Tokio runtime.
pub(crate) fn register(watchdog: &Arc<Watchdog>, held: &Arc<Held>) -> u64 {
    let mut state = watchdog.state();
    let id = state.locks.insert(Arc::clone(held));
    if state.task.as_ref().is_some_and(|task| !task.is_finished()) {
        let needed = held.next_renewal().map_or(held.valid_until(), |(at, _)| at);
        if state.wake_at.is_some_and(|wake| needed < wake) {
            watchdog.wake.notify_one();
        }
    } else {
        // Woken by nothing yet: it scans the registry first.
        state.wake_at = None;
        state.idle_since = None;
        let task = run(Arc::clone(watchdog));
        state.task = Some(watchdog.quorum.tasks.spawn(BackgroundWork::Renewal, task));
    }
    id
}

/// The watchdog task: sleeps until the next renewal or expiry, renews all
/// due locks in one batch, and ends when no lock was left to renew for
/// [`WATCHDOG_LINGER`] or the client shuts down (which releases the locks
/// itself).
async fn run(watchdog: Arc<Watchdog>) {
    let closing = watchdog.quorum.tasks.closing().clone();
    while let Some(mut scan) = watchdog.scan(Instant::now(), &closing) {
        for held in &scan.expired {
            lose(
                &watchdog.quorum,
                held,
                Loss::ValidityRanOut,
                "validity ran out before a majority confirmed a renewal",
            );
        }
        if !scan.due.is_empty() {
            scan.due.append(&mut scan.early);
            scan.due.retain(|held| held.start_renewal());
            if !scan.due.is_empty() {
                renew(&watchdog, &scan.due).await;
            }
            continue;
        }
        if let Some(at) = scan.wake_at {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = watchdog.wake.notified() => {}
                () = closing.cancelled() => {}
            }
        }
    }
}

/// One tick: renews `due` on every node with one pipeline of renewal
/// script calls per node, and applies each lock's outcome.
async fn renew(watchdog: &Watchdog, due: &[Arc<Held>]) {
    let span = tracing::debug_span!(
        "quorumlock.renew",
        locks = due.len(),
        confirmed = Empty,
        elapsed_ms = Empty
    );
    renew_round(watchdog, due).instrument(span).await;
}

/// [`renew`]'s round, inside its span.
async fn renew_round(watchdog: &Watchdog, due: &[Arc<Held>]) {
    let quorum = &watchdog.quorum;
    let start = Instant::now();
    let items: Arc<[RenewItem]> = due.iter().map(|held| renew_item(held)).collect();
    let calls = Arc::new(Renew::chunks(&items, watchdog.heal, quorum.one_slot()));
    // Confirmations count only while every lock of the batch is still valid.
    let earliest = due.iter().map(|held| held.valid_until()).min().unwrap_or(start);
    let deadline = (start + quorum.node_timeout).min(earliest);
    let mut tallies: Vec<Tally> = due.iter().map(|_| Tally::new(quorum.len())).collect();
    quorum
        .gather(
            deadline,
            deadline,
            |i| {
                let (nodes, calls) = (Arc::clone(&quorum.nodes), Arc::clone(&calls));
                // Each round also reads the node's clock, for its rate.
                async move { nodes[i].send_pipeline(&calls).await }
            },
            |i, outcome| {
                // A node whose replicas did not acknowledge (replica-acknowledged
                // mode) fails for every lock of the batch.
                match outcome.and_then(|acked| acked) {
                    Ok(replies) => {
                        // Each call's locks, in order; a call that failed
                        // (a cluster primary down) counts for none of its
                        // locks, and the others count.
                        let mut locks = tallies.iter_mut().zip(items.iter());
                        for (call, reply) in calls.iter().zip(replies) {
                            let locks = locks.by_ref().take(call.len());
                            let statuses = match reply {
                                Ok(statuses) => statuses,
                                Err(error) => {
                                    tracing::debug!(node = quorum.nodes[i].name(), %error, "renewal failed on node");
                                    locks.for_each(drop);
                                    continue;
                                }
                            };
                            for ((tally, item), status) in locks.zip(statuses) {
                                // A node whose clock turned too fast for the
                                // lock's ttl keeps it too briefly to count.
                                if status.confirmed() && quorum.too_fast(i, item.ttl).is_none() {
                                    tally.confirm(i);
                                } else if status == RenewStatus::Foreign {
                                    tally.refuse(i);
                                }
                            }
                        }
                    }
                    // Counted as neither: the lock's outcome needs only the
                    // confirmations and the foreign tokens.
                    Err(error) => {
                        tracing::debug!(node = quorum.nodes[i].name(), ?error, "renewal failed on node");
                    }
                }
                ControlFlow::Continue(())
            },
        )
        .await;
    // Every node has been handed the round (the requests still pending run
    // in the background): releases may go now.
    for held in due {
        held.end_renewal();
    }
    let span = tracing::Span::current();
    span.record(
        "confirmed",
        tallies.iter().filter(|tally| tally.reached()).count(),
    );
    span.record("elapsed_ms", start.elapsed().as_millis() as u64);
    for ((held, item), tally) in due.iter().zip(items.iter()).zip(tallies) {
        apply(quorum, held, item.ttl, start, &tally);
    }
}

/// A lock's outcome of one renewal round that started at `start`.
fn apply(quorum: &Arc<Quorum>, held: &Arc<Held>, ttl: Duration, start: Instant, tally: &Tally) {
    if !tally.reached() {
        metrics::renewal(false);
    }
    if tally.reached() {
        if held.confirm(&quorum.lease(start, ttl, tally), tally.ok) {
            held.count_renewal();
            tracing::trace!(resources = ?held.resources.names(), confirmed = tally.ok, "lock renewed");
        } else {
            lose(
                quorum,
                held,
                Loss::ValidityRanOut,
                "validity ran out while the renewal was confirmed",
            );
        }
    } else if tally.refused_by_majority() {
        lose(
            quorum,
            held,
            Loss::Taken,
            "a majority of nodes holds another token",
        );
    } else {
        // Retry after one more per-node timeout: several tries fit in the
        // remaining validity (the ttl is far larger than the timeout),
        // without hammering a struggling node.
        held.retry_at(Instant::now() + quorum.node_timeout, tally.ok);
        tracing::debug!(
            resources = ?held.resources.names(),
            ?tally,
            "renewal not confirmed by a majority, retrying"
        );
    }
}

/// Fires the holder's loss signal (once) and releases our token everywhere,
/// best effort: our keys may still sit on some nodes. The release is sent
/// even when the holder's local timer fired the signal first.
fn lose(quorum: &Arc<Quorum>, held: &Arc<Held>, cause: Loss, reason: &'static str) {
    if held.mark_lost(cause) {
        tracing::warn!(resources = ?held.resources.names(), reason, "lock lost");
    }
    if !held.claim_release() {
        return;
    }
    release_in_background(quorum, held);
}

/// `held` in a renewal, with its current ttl.
fn renew_item(held: &Held) -> RenewItem {
    RenewItem {
        keys: Arc::clone(held.resources.keys()),
        token: Arc::clone(&held.token),
        ttl: held.ttl(),
    }
}
