//! The shared watchdog: one task per client renews every held lock in
//! batches, and tells a holder when its lock is lost.
//!
//! The naive watchdog (one loop per lock, a blind `PEXPIRE` every ttl/3)
//! extends whoever holds the key, never tells the holder when renewal fails,
//! and costs a timer and N commands per lock per tick. Here:
//! - renewal is owner-checked and sends each node one script per tick for
//!   all due locks ([`Node::renew`](crate::node::Node::renew)), so round trips per tick are O(nodes);
//! - a lock counts as renewed only when a majority confirmed before its
//!   validity ended; the new validity is measured from the tick's start;
//! - loss (validity ran out unconfirmed, or a majority reports another token)
//!   fires the holder's signal once, stops renewal and releases our token;
//! - the signal never depends on this task: [`Held::lost`] also waits on a
//!   local timer at `valid_until`, so a holder learns of the loss on time
//!   even when every renewal request hangs.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::builder::Config;
use crate::guard::release_held;
use crate::lock::Resources;
use crate::node::RenewItem;
use crate::options::LockOptions;
use crate::quorum::{self, Until};
use crate::tasks::Work;

/// A lock is renewed every `ttl / RENEW_DIVISOR`.
///
/// Renewing at a third of the ttl leaves two more thirds of validity for
/// retries when a round fails, before the lock would run out (the rule
/// Redisson's watchdog and the original brief use).
pub(crate) const RENEW_DIVISOR: u32 = 3;

/// The state of one held lock, shared by its guard and the watchdog.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) resources: Resources,
    pub(crate) token: Arc<str>,
    /// The fencing token agreed at acquisition, if fenced.
    pub(crate) fence: Option<u64>,
    /// Fired once, by whoever sees the loss first (watchdog or local timer).
    lost: CancellationToken,
    /// The release of our keys was started (by the guard, its drop, a loss
    /// or a shutdown); the others need not send it again.
    releasing: AtomicBool,
    /// A renewal round of this lock was handed to every node (see
    /// [`Held::renewals_handed_over`]).
    renewal_handed_over: Notify,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The ttl renewals set on the nodes.
    ttl: Duration,
    valid_until: Instant,
    acquired_at: Instant,
    /// When the next renewal is due.
    renew_at: Instant,
    /// The last round failed: retry exactly at `renew_at`, not batched early.
    retrying: bool,
    renewals: u32,
    /// Nodes that confirmed our token in the last acquire/renew/extend round.
    confirmed: usize,
    max_hold: Option<Duration>,
    max_renewals: Option<u32>,
    /// A renewal round of this lock is being handed to the nodes.
    renewing: bool,
    /// A release has begun: no renewal round may start any more.
    released: bool,
}

impl Held {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        resources: Resources,
        token: Arc<str>,
        fence: Option<u64>,
        ttl: Duration,
        start: Instant,
        valid_until: Instant,
        confirmed: usize,
        options: &LockOptions,
    ) -> Self {
        Held {
            resources,
            token,
            fence,
            lost: CancellationToken::new(),
            releasing: AtomicBool::new(false),
            renewal_handed_over: Notify::new(),
            state: Mutex::new(State {
                ttl,
                valid_until,
                acquired_at: start,
                renew_at: start + ttl / RENEW_DIVISOR,
                retrying: false,
                renewals: 0,
                confirmed,
                max_hold: options.max_hold,
                max_renewals: options.max_renewals,
                renewing: false,
                released: false,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data, valid after any panic in another thread.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn confirmed(&self) -> usize {
        self.state().confirmed
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Not lost, and the validity has not passed.
    pub(crate) fn is_held(&self) -> bool {
        !self.is_lost() && Instant::now() < self.valid_until()
    }

    /// Completes when the lock is lost: from the watchdog, or at the latest
    /// from a local timer at `valid_until` (re-armed when a renewal moves it).
    pub(crate) async fn lost(&self) {
        loop {
            let until = self.valid_until();
            tokio::select! {
                () = self.lost.cancelled() => return,
                () = tokio::time::sleep_until(until) => {
                    if self.valid_until() <= Instant::now() {
                        self.mark_lost();
                        return;
                    }
                }
            }
        }
    }

    /// Fires the loss signal; `true` only for the call that fired it.
    pub(crate) fn mark_lost(&self) -> bool {
        let first = !self.lost.is_cancelled();
        self.lost.cancel();
        first
    }

    /// Ends renewal for good and waits until no renewal round of this lock is
    /// still being handed to the nodes; every release calls it first.
    ///
    /// A renewal heals (`SET NX` with our token) a node where our key is
    /// missing. Were a round handed to a node after our release, it would
    /// find the key just deleted and set it again: a key nobody owns, in the
    /// way of every other owner for a ttl. After this returns, each node got
    /// any renewal of this lock before the release that follows.
    pub(crate) async fn renewals_handed_over(&self) {
        if !self.mark_released() {
            // The usual case, on every release: no round in progress.
            return;
        }
        loop {
            let handed_over = self.renewal_handed_over.notified();
            tokio::pin!(handed_over);
            handed_over.as_mut().enable();
            {
                let mut state = self.state();
                state.released = true;
                if !state.renewing {
                    return;
                }
            }
            handed_over.await;
        }
    }

    /// Marks the lock released (no renewal round starts after this) and
    /// says whether one is being handed over now.
    fn mark_released(&self) -> bool {
        let mut state = self.state();
        state.released = true;
        state.renewing
    }

    /// Takes this lock into a renewal round; `false` once a release has
    /// begun (see [`Held::renewals_handed_over`]).
    fn start_renewal(&self) -> bool {
        let mut state = self.state();
        state.renewing = !state.released;
        state.renewing
    }

    /// The renewal round is handed to every node.
    fn end_renewal(&self) {
        self.state().renewing = false;
        self.renewal_handed_over.notify_waiters();
    }

    /// Claims the release of our keys; `true` only for the first caller.
    /// Independent of the loss signal: a lock whose loss the holder's local
    /// timer saw first must still be released by the watchdog.
    pub(crate) fn claim_release(&self) -> bool {
        !self.releasing.swap(true, Ordering::AcqRel)
    }

    /// Records a majority confirmation of a round that started at `start`
    /// with `ttl`: the lock is ours until `start + ttl - drift`. Returns
    /// `false` (and changes nothing) when the lock was already lost or its
    /// validity has passed: a lock is never resurrected, because a holder may
    /// already have acted on its loss.
    pub(crate) fn confirm(&self, start: Instant, ttl: Duration, drift: Duration, confirmed: usize) -> bool {
        let mut state = self.state();
        if self.is_lost() || state.valid_until <= Instant::now() {
            return false;
        }
        state.ttl = ttl;
        state.valid_until = start + ttl - drift;
        state.renew_at = start + ttl / RENEW_DIVISOR;
        state.retrying = false;
        state.confirmed = confirmed;
        true
    }

    /// Records a failed round: try again at `at` unless the lock runs out first.
    fn retry_at(&self, at: Instant, confirmed: usize) {
        let mut state = self.state();
        state.renew_at = at;
        state.retrying = true;
        state.confirmed = confirmed;
    }

    /// When the watchdog should renew this lock next, or `None` once a hold
    /// limit is reached (the lock then runs out at its validity).
    fn next_renewal(&self) -> Option<(Instant, bool)> {
        let state = self.state();
        let over_hold = state
            .max_hold
            .and_then(|max| state.acquired_at.checked_add(max))
            .is_some_and(|limit| state.renew_at >= limit);
        let over_count = state.max_renewals.is_some_and(|max| state.renewals >= max);
        (!over_hold && !over_count).then_some((state.renew_at, state.retrying))
    }
}

/// The registry of renewed locks and the handle on the one renewal task.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    registry: Mutex<Registry>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Registry {
    locks: HashMap<u64, Arc<Held>>,
    next_id: u64,
    /// The renewal task, while it runs. One whose runtime shut down counts
    /// as finished, so that the next lock taken on another runtime starts a
    /// new one instead of waiting on a task that will never run again.
    task: Option<JoinHandle<()>>,
    /// When the sleeping task wakes next (`None`: it is about to scan the
    /// registry anyway). A new lock wakes it only if it needs it sooner, so
    /// that taking a lock costs no wake-up and no scan of all locks.
    wake_at: Option<Instant>,
}

impl Watchdog {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops renewing lock `id` (released or dropped). The task notices at
    /// its next wake-up (and ends then if no lock is left).
    pub(crate) fn unregister(&self, id: u64) {
        self.registry().locks.remove(&id);
    }

    /// Locks currently renewed (for tests and metrics).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.registry().locks.len()
    }
}

/// Starts renewing `held`; spawns the client's watchdog task if it is not
/// running. Returns the id to unregister with. Must run inside a Tokio runtime.
pub(crate) fn register(config: &Arc<Config>, held: &Arc<Held>) -> u64 {
    let watchdog = &config.watchdog;
    let mut registry = watchdog.registry();
    let id = registry.next_id;
    registry.next_id += 1;
    registry.locks.insert(id, Arc::clone(held));
    if registry.task.as_ref().is_some_and(|task| !task.is_finished()) {
        let needed = held.next_renewal().map_or(held.valid_until(), |(at, _)| at);
        if registry.wake_at.is_some_and(|wake| needed < wake) {
            watchdog.wake.notify_one();
        }
    } else {
        // Woken by nothing yet: it scans the registry first.
        registry.wake_at = None;
        registry.task = Some(config.tasks.spawn(Work::Renewal, run(Arc::clone(config))));
    }
    id
}

/// The watchdog task: sleeps until the next renewal or expiry, renews all
/// due locks in one batch, and ends when no lock is left to renew or the
/// client shuts down (which releases the locks itself).
async fn run(config: Arc<Config>) {
    let watchdog = &config.watchdog;
    let closing = config.tasks.closing();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        let mut early = Vec::new();
        let mut expired = Vec::new();
        let mut next_wake: Option<Instant> = None;
        {
            let mut registry = watchdog.registry();
            if registry.locks.is_empty() || closing.is_cancelled() {
                registry.locks.clear();
                registry.task = None;
                return;
            }
            registry.locks.retain(|_, held| {
                if held.state().released {
                    return false;
                }
                let valid_until = held.valid_until();
                if held.is_lost() || valid_until <= now {
                    expired.push(Arc::clone(held));
                    return false;
                }
                let mut wake = valid_until;
                if let Some((renew_at, retrying)) = held.next_renewal() {
                    // A tick comes when the earliest renewal is due, and
                    // takes along every regular renewal due within the next
                    // half period: locks acquired at scattered times are
                    // renewed together (a little early, which is harmless,
                    // and never late), and the next tick is at least half a
                    // period away, so the number of ticks, and of round
                    // trips, does not grow with the number of locks. A lone
                    // lock is renewed exactly every ttl/3. Retries keep their
                    // exact time.
                    let window = if retrying {
                        Duration::ZERO
                    } else {
                        held.ttl() / (RENEW_DIVISOR * 2)
                    };
                    if renew_at <= now {
                        due.push(Arc::clone(held));
                    } else if renew_at <= now + window {
                        early.push(Arc::clone(held));
                        wake = wake.min(renew_at);
                    } else {
                        wake = wake.min(renew_at);
                    }
                }
                next_wake = Some(next_wake.map_or(wake, |w| w.min(wake)));
                true
            });
            registry.wake_at = if due.is_empty() && expired.is_empty() {
                next_wake
            } else {
                None
            };
        }
        for held in expired {
            lose(
                &config,
                &held,
                "validity ran out before a majority confirmed a renewal",
            );
        }
        if !due.is_empty() {
            due.append(&mut early);
            due.retain(|held| held.start_renewal());
            if !due.is_empty() {
                renew(&config, &due).await;
            }
            continue;
        }
        if let Some(at) = next_wake {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = watchdog.wake.notified() => {}
                () = closing.cancelled() => {}
            }
        }
    }
}

/// One tick: renews `due` on every node with one script call per node, and
/// applies each lock's outcome.
async fn renew(config: &Arc<Config>, due: &[Arc<Held>]) {
    let start = Instant::now();
    let items: Arc<[RenewItem]> = due
        .iter()
        .map(|held| RenewItem {
            keys: held.resources.clone(),
            token: Arc::clone(&held.token),
            ttl: held.ttl(),
        })
        .collect();
    // Confirmations count only while every lock of the batch is still valid.
    let earliest = due.iter().map(|held| held.valid_until()).min().unwrap_or(start);
    let deadline = (start + config.node_timeout).min(earliest);
    let (mut ok, mut other) = (vec![0usize; due.len()], vec![0usize; due.len()]);
    quorum::gather(
        &config.nodes,
        &config.tasks,
        deadline,
        deadline,
        |i| {
            let (nodes, items, heal) = (Arc::clone(&config.nodes), Arc::clone(&items), config.heal);
            async move { nodes[i].renew(&items, heal).await }
        },
        |i, outcome| {
            // A node whose replicas did not acknowledge (replica-acknowledged
            // mode) fails for every lock of the batch.
            match outcome.and_then(|acked| acked) {
                Ok(statuses) => {
                    for (j, status) in statuses.into_iter().enumerate() {
                        match status {
                            1 | 2 => ok[j] += 1,
                            -1 => other[j] += 1,
                            _ => {}
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(node = config.nodes[i].name(), ?error, "renewal failed on node")
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
    let nodes = config.nodes.len();
    let quorum = quorum::quorum(nodes);
    for (j, held) in due.iter().enumerate() {
        let ttl = items[j].ttl;
        if ok[j] >= quorum {
            let drift = quorum::drift(ttl, config.drift_factor, config.drift_fixed);
            if held.confirm(start, ttl, drift, ok[j]) {
                held.state().renewals += 1;
                tracing::trace!(resources = ?held.resources.names(), confirmed = ok[j], "lock renewed");
            } else {
                lose(config, held, "validity ran out while the renewal was confirmed");
            }
        } else if other[j] > nodes - quorum {
            lose(config, held, "a majority of nodes holds another token");
        } else {
            // Retry after one more per-node timeout: several tries fit in the
            // remaining validity (the ttl is far larger than the timeout),
            // without hammering a struggling node.
            held.retry_at(Instant::now() + config.node_timeout, ok[j]);
            tracing::debug!(
                resources = ?held.resources.names(),
                confirmed = ok[j],
                "renewal not confirmed by a majority, retrying"
            );
        }
    }
}

/// Fires the holder's loss signal (once) and releases our token everywhere,
/// best effort: our keys may still sit on some nodes. The release is sent
/// even when the holder's local timer fired the signal first.
fn lose(config: &Arc<Config>, held: &Arc<Held>, reason: &'static str) {
    if held.mark_lost() {
        tracing::warn!(resources = ?held.resources.names(), reason, "lock lost");
    }
    if !held.claim_release() {
        return;
    }
    let (config, held) = (Arc::clone(config), Arc::clone(held));
    config.tasks.clone().spawn(Work::Release, async move {
        let deadline = Instant::now() + config.node_timeout;
        release_held(&config, &held, deadline, Until::All).await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ttl: Duration, options: &LockOptions) -> Held {
        let now = Instant::now();
        Held::new(
            Resources::from("r"),
            "t".into(),
            None,
            ttl,
            now,
            now + ttl,
            1,
            options,
        )
    }

    #[tokio::test]
    async fn a_lost_lock_is_never_confirmed_again() {
        let held = held(Duration::from_secs(10), &LockOptions::default());
        assert!(held.is_held());
        assert!(held.mark_lost());
        assert!(!held.mark_lost(), "the signal fires once");
        let now = Instant::now();
        assert!(!held.confirm(now, Duration::from_secs(10), Duration::ZERO, 3));
        assert!(!held.is_held());
    }

    #[tokio::test(start_paused = true)]
    async fn the_local_timer_fires_the_loss_at_valid_until() {
        let held = held(Duration::from_secs(10), &LockOptions::default());
        let until = held.valid_until();
        held.lost().await;
        assert!(Instant::now() >= until);
        assert!(held.is_lost());
    }

    #[test]
    fn hold_limits_stop_renewal() {
        let limited = held(Duration::from_secs(3), &LockOptions::default().max_renewals(0));
        assert!(limited.next_renewal().is_none());
        let short = held(
            Duration::from_secs(3),
            &LockOptions::default().max_hold(Duration::from_millis(500)),
        );
        assert!(
            short.next_renewal().is_none(),
            "the first renewal (at 1 s) is past the 500 ms hold limit"
        );
        let free = held(Duration::from_secs(3), &LockOptions::default());
        assert!(free.next_renewal().is_some());
        assert_eq!(Watchdog::default().len(), 0);
    }
}
