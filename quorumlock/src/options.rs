//! Per-call lock settings: waiting, retries, minimum validity, auto-renewal.

use std::time::Duration;

use crate::config::{DEFAULT_MIN_VALIDITY, DEFAULT_RETRY_DELAY, DEFAULT_WAIT, MIN_RETRY_DELAY};
use crate::error::{Error, Result};

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

    /// Mean delay between attempts of [`crate::Redlock::lock`] when nodes
    /// fail, randomised by ±50 %. Under contention a waiter retries as soon
    /// as the holder's release is announced, and otherwise polls with a
    /// delay that starts at an eighth of this and doubles up to it (for
    /// releases that send no announcement, such as expiry).
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

    /// Whether acquisitions also agree on a fencing token
    /// ([`crate::Guard::fence_token`]): a number that grows with every new
    /// holder of the resource, for the resource to refuse a stale holder's
    /// writes (see [`crate::FencedWrite`]). Costs one more round trip per
    /// acquisition. Off by default.
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
            return Err(Error::Config("max attempts must be at least 1".into()));
        }
        if self.retry_delay < MIN_RETRY_DELAY {
            return Err(Error::Config(format!(
                "retry delay must be at least {MIN_RETRY_DELAY:?}, got {:?}",
                self.retry_delay
            )));
        }
        Ok(())
    }
}
