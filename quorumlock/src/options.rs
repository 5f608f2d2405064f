//! Per-call lock settings: waiting, retries, minimum validity, auto-renewal.

use std::time::Duration;

use crate::config::{DEFAULT_MIN_VALIDITY, DEFAULT_RETRY_DELAY, DEFAULT_WAIT, MAX_TTL, MIN_RETRY_DELAY};
use crate::error::{Error, Result, Setting};

/// How a lock is taken and kept: the settings that may differ per call.
///
/// A client carries a set of these (from its builder); derive a client with
/// other settings, sharing connections and watchdog, with
/// [`crate::Redlock::with_options`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// // Same nodes, but no auto-renewal and no waiting.
/// let manual = redlock.with_options(redlock.options().auto_renew(false).max_attempts(1))?;
/// assert!(!manual.options().renews());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct LockOptions {
    pub(crate) wait: Duration,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) retry_delay: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) auto_renew: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) max_renewals: Option<u32>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) fenced: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            wait: DEFAULT_WAIT,
            max_attempts: None,
            retry_delay: DEFAULT_RETRY_DELAY,
            min_validity: DEFAULT_MIN_VALIDITY,
            auto_renew: true,
            max_hold: None,
            max_renewals: None,
            min_hold: None,
            fenced: false,
        }
    }
}

impl LockOptions {
    /// The defaults: wait [`DEFAULT_WAIT`], retry delay
    /// [`DEFAULT_RETRY_DELAY`], no attempt limit, minimum validity
    /// [`DEFAULT_MIN_VALIDITY`], auto-renewal on, no hold limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long [`crate::Redlock::lock`] keeps trying.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Stop [`crate::Redlock::lock`] after this many attempts even if the
    /// wait has not run out (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Mean delay between attempts of [`crate::Redlock::lock`], randomised
    /// by ±50 %, the same for every retry. Under contention a waiter retries
    /// as soon as a release names it (it is first in line), and otherwise
    /// after this delay: for releases that announce nothing (expiry, other
    /// libraries), lost announcements, and failing nodes. Idempotency keys
    /// poll a busy key with a delay that starts at an eighth of this and
    /// doubles up to it.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Treat an acquisition (or extension) that leaves less validity than
    /// this as failed ([`Error::ValidityUsedUp`]), for critical sections that
    /// need a known amount of time.
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.min_validity = min;
        self
    }

    /// Whether the client's shared watchdog keeps the lock alive (renewing it
    /// every third of its ttl) until it is released or dropped. On by default.
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }

    /// Stop renewing once the lock has been held this long: it then runs out
    /// at its validity and the holder is told it was lost. The Redlock
    /// description asks that extensions be limited, so that a holder stuck
    /// in a loop cannot keep a resource forever. No limit by default.
    pub fn max_hold(mut self, limit: Duration) -> Self {
        self.max_hold = Some(limit);
        self
    }

    /// Stop renewing after this many renewals (see [`LockOptions::max_hold`]).
    pub fn max_renewals(mut self, limit: u32) -> Self {
        self.max_renewals = Some(limit);
        self
    }

    /// Keep the lock for at least this long after it was taken, even when it
    /// is given back sooner: a release (by [`crate::Guard::release`], at the
    /// end of [`crate::Redlock::with_lock`], or by dropping the guard) before
    /// then stops renewal but does not delete the keys; it sets them, on
    /// every node that still holds our token, to expire when `min_hold` has
    /// passed since the acquisition began, and
    /// [`crate::ReleaseReport::kept_until`] says so. Until then nobody else
    /// can take the lock.
    ///
    /// For jobs that must run once per period on a fleet: started from every
    /// machine's crontab, a short job would otherwise run again on each
    /// machine that was still waiting when the first one finished. With a
    /// minimum hold longer than the others wait, they give up instead. No
    /// minimum by default; at most [`MAX_TTL`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::LockOptions;
    ///
    /// // Others wait 5 s at most; the lock stays taken for 1 min whatever the job takes.
    /// let once = LockOptions::new()
    ///     .wait(Duration::from_secs(5))
    ///     .min_hold(Duration::from_secs(60));
    /// # let _ = once;
    /// ```
    pub fn min_hold(mut self, hold: Duration) -> Self {
        self.min_hold = Some(hold);
        self
    }

    /// Whether acquisitions also agree on a fencing token
    /// ([`crate::Guard::fence_token`]): a number that grows with every new
    /// holder of the resource, for the resource to refuse a stale holder's
    /// writes (see [`crate::FencedWrite`]). On Redis nodes whose clocks
    /// agree the token usually comes with the grant; otherwise it costs one
    /// more round trip. Off by default.
    pub fn fenced(mut self, on: bool) -> Self {
        self.fenced = on;
        self
    }

    /// Whether locks taken with these options are renewed by the watchdog.
    pub fn renews(&self) -> bool {
        self.auto_renew
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_attempts == Some(0) {
            return Err(Error::config(
                Setting::MaxAttempts,
                "max attempts must be at least 1",
            ));
        }
        if self.retry_delay < MIN_RETRY_DELAY {
            return Err(Error::config(
                Setting::RetryDelay,
                format!(
                    "retry delay must be at least {MIN_RETRY_DELAY:?}, got {:?}",
                    self.retry_delay
                ),
            ));
        }
        if let Some(hold) = self.min_hold
            && hold > MAX_TTL
        {
            return Err(Error::config(
                Setting::MinHold,
                format!("min hold must be at most {MAX_TTL:?}, got {hold:?}"),
            ));
        }
        Ok(())
    }
}
