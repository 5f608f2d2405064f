//! The state of one held lock (validity, loss signal, renewal schedule),
//! shared by its guard, the watchdog and a shutdown, and the registry of
//! every lock a client's guards hold.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::resources::Resources;
use crate::config::RENEW_DIVISOR;
use crate::lock::lease::Lease;
use crate::metrics::{self, Loss};
use crate::options::LockOptions;

/// The state of one held lock, shared by its guard and the watchdog.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) resources: Resources,
    pub(crate) token: Arc<str>,
    /// The fencing token agreed at acquisition, if fenced.
    pub(crate) fence: Option<u64>,
    /// Until when a release keeps the keys instead of deleting them
    /// ([`LockOptions::min_hold`] past the acquisition's start).
    min_hold_until: Option<Instant>,
    /// Fired once, by whoever sees the loss first (watchdog or local timer).
    lost: CancellationToken,
    /// The release of our keys was started (by the guard, its drop, a loss
    /// or a shutdown); the others need not send it again.
    releasing: AtomicBool,
    /// A renewal round of this lock was handed to every node (see
    /// [`Held::renewals_handed_over`]).
    renewal_handed_over: Notify,
    /// A confirmation moved `valid_until` earlier (a granting node's clock
    /// turned out fast): the local loss timer must wake for the new end.
    validity_shortened: Notify,
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

/// What an acquisition that a majority granted hands to its [`Held`].
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) resources: Resources,
    pub(crate) token: Arc<str>,
    /// The fencing token agreed, if fenced.
    pub(crate) fence: Option<u64>,
    /// What the granting round made ours.
    pub(crate) lease: Lease,
    /// Nodes that granted.
    pub(crate) confirmed: usize,
}

impl Held {
    pub(crate) fn new(acquired: Granted, options: &LockOptions) -> Self {
        let Granted {
            resources,
            token,
            fence,
            lease,
            confirmed,
        } = acquired;
        let (start, ttl, valid_until) = (lease.start, lease.ttl, lease.valid_until());
        Held {
            resources,
            token,
            fence,
            // Validated options keep it within MAX_TTL, which always fits.
            min_hold_until: options.min_hold.and_then(|hold| start.checked_add(hold)),
            lost: CancellationToken::new(),
            releasing: AtomicBool::new(false),
            renewal_handed_over: Notify::new(),
            validity_shortened: Notify::new(),
            state: Mutex::new(State {
                ttl,
                valid_until,
                acquired_at: start,
                renew_at: renewal_due(start, ttl, valid_until),
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

    /// When the acquisition of this lock began (before its first request).
    pub(crate) fn acquired_at(&self) -> Instant {
        self.state().acquired_at
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
    /// from a local timer at `valid_until` (re-armed when a renewal moves it,
    /// and woken when one moves it earlier).
    pub(crate) async fn lost(&self) {
        loop {
            // Before reading the end: a shortening after the read wakes us.
            let shortened = self.validity_shortened.notified();
            let until = self.valid_until();
            tokio::select! {
                // Ready branches are taken in the order written: a simulated run
                // replays the same for the same seed (the `sim` feature).
                biased;
                () = self.lost.cancelled() => return,
                () = shortened => {}
                () = tokio::time::sleep_until(until) => {
                    if self.valid_until() <= Instant::now() {
                        self.mark_lost(Loss::ValidityRanOut);
                        return;
                    }
                }
            }
        }
    }

    /// Fires the loss signal, and records the loss and its `cause`; `true`
    /// only for the call that fired it.
    pub(crate) fn mark_lost(&self, cause: Loss) -> bool {
        let first = !self.lost.is_cancelled();
        self.lost.cancel();
        if first {
            metrics::loss(cause, self.acquired_at().elapsed());
        }
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
    pub(crate) fn mark_released(&self) -> bool {
        let mut state = self.state();
        state.released = true;
        state.renewing
    }

    /// Takes this lock into a renewal round; `false` once a release has
    /// begun (see [`Held::renewals_handed_over`]).
    pub(crate) fn start_renewal(&self) -> bool {
        let mut state = self.state();
        state.renewing = !state.released;
        state.renewing
    }

    /// The renewal round is handed to every node.
    pub(crate) fn end_renewal(&self) {
        self.state().renewing = false;
        self.renewal_handed_over.notify_waiters();
    }

    /// Claims the release of our keys; `true` only for the first caller.
    /// Independent of the loss signal: a lock whose loss the holder's local
    /// timer saw first must still be released by the watchdog.
    pub(crate) fn claim_release(&self) -> bool {
        !self.releasing.swap(true, Ordering::AcqRel)
    }

    /// A release (or a loss's give-back) has been claimed.
    pub(crate) fn is_releasing(&self) -> bool {
        self.releasing.load(Ordering::Acquire)
    }

    /// Records a majority confirmation: the lock is ours until the
    /// `lease`'s end. Returns `false` (and changes nothing) when the lock
    /// was already lost or its validity has passed: a lock is never
    /// resurrected, because a holder may already have acted on its loss.
    /// Also `false` when the new validity has passed already (a node of the
    /// majority turned out so fast that its key may be gone): the caller
    /// then treats the lock as lost.
    pub(crate) fn confirm(&self, lease: &Lease, confirmed: usize) -> bool {
        let valid_until = lease.valid_until();
        let now = Instant::now();
        let mut state = self.state();
        if self.is_lost() || state.valid_until <= now || valid_until <= now {
            return false;
        }
        let shortened = valid_until < state.valid_until;
        state.ttl = lease.ttl;
        state.valid_until = valid_until;
        state.renew_at = renewal_due(lease.start, lease.ttl, valid_until);
        state.retrying = false;
        state.confirmed = confirmed;
        drop(state);
        if shortened {
            self.validity_shortened.notify_waiters();
        }
        true
    }

    /// Records a failed round: try again at `at` unless the lock runs out first.
    pub(crate) fn retry_at(&self, at: Instant, confirmed: usize) {
        let mut state = self.state();
        state.renew_at = at;
        state.retrying = true;
        state.confirmed = confirmed;
    }

    /// When the watchdog should renew this lock next, or `None` once a hold
    /// limit is reached (the lock then runs out at its validity).
    pub(crate) fn next_renewal(&self) -> Option<(Instant, bool)> {
        let state = self.state();
        let over_hold = state
            .max_hold
            .and_then(|max| state.acquired_at.checked_add(max))
            .is_some_and(|limit| state.renew_at >= limit);
        let over_count = state.max_renewals.is_some_and(|max| state.renewals >= max);
        (!over_hold && !over_count).then_some((state.renew_at, state.retrying))
    }
}

impl Held {
    /// The instant until which a release at `now` must keep the keys rather
    /// than delete them, if the minimum hold has not passed by then.
    pub(crate) fn keep_until(&self, now: Instant) -> Option<Instant> {
        self.min_hold_until.filter(|until| now < *until)
    }

    /// Whether a release has begun (renewal stops for good).
    pub(crate) fn is_released(&self) -> bool {
        self.state().released
    }

    /// One more confirmed renewal, for the hold limits.
    pub(crate) fn count_renewal(&self) {
        self.state().renewals += 1;
        metrics::renewal(true);
    }
}

/// When a lock confirmed at `start` for `ttl` and valid until `valid_until`
/// is renewed next: a third of the ttl later, or halfway to the end of its
/// validity if that comes first (a node's fast clock shortened it), so that
/// a renewal always has time to be confirmed before the validity ends.
fn renewal_due(start: Instant, ttl: Duration, valid_until: Instant) -> Instant {
    (start + ttl / RENEW_DIVISOR).min(start + valid_until.saturating_duration_since(start) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(start: Instant, ttl: Duration, life: Duration) -> Lease {
        Lease {
            start,
            ttl,
            life,
            drift: Duration::ZERO,
        }
    }

    fn held(ttl: Duration, options: &LockOptions) -> Held {
        let acquired = Granted {
            resources: Resources::from("r"),
            token: "t".into(),
            fence: None,
            lease: lease(Instant::now(), ttl, ttl),
            confirmed: 1,
        };
        Held::new(acquired, options)
    }

    #[tokio::test]
    async fn a_lost_lock_is_never_confirmed_again() {
        let held = held(Duration::from_secs(10), &LockOptions::default());
        assert!(held.is_held());
        assert!(held.mark_lost(Loss::Taken));
        assert!(!held.mark_lost(Loss::Taken), "the signal fires once");
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        assert!(!held.confirm(&lease(now, ttl, ttl), 3));
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

    #[tokio::test(start_paused = true)]
    async fn a_confirmation_that_shortens_the_validity_fires_the_loss_at_the_new_end() {
        let ttl = Duration::from_secs(10);
        let held = held(ttl, &LockOptions::default());
        let start = Instant::now();
        let lost = async {
            held.lost().await;
            Instant::now()
        };
        let shorten = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            // A node of the majority runs 2x fast: the keys live 5 s.
            assert!(held.confirm(&lease(start, ttl, ttl / 2), 2));
        };
        let (fired, ()) = tokio::join!(lost, shorten);
        assert_eq!(fired, start + ttl / 2);
        assert!(held.is_lost());
        // A renewal that finds the keys may be gone already is no renewal.
        let fresh = self::held(ttl, &LockOptions::default());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!fresh.confirm(&lease(start, ttl, Duration::from_secs(1)), 2));
        assert!(
            fresh.is_held(),
            "unchanged: the caller decides what the loss means"
        );
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
    }
}
