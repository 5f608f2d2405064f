//! Waiting for a lock: attempts until one succeeds or the wait runs out,
//! woken by the release that hands the lock over rather than by polling
//! alone.
//!
//! On the first refusal a waiter subscribes to its client's wake-up
//! channel and queues on every node ([`queue`]). From then on each attempt
//! keeps its place in line (for one resource, fenced or not, inside the
//! acquire request itself), and the waiter sleeps until a release names it,
//! or until the retry delay passes. A named waiter that loses the race (to a
//! caller that did not queue) takes its old place again.
//!
//! Polling with a jittered delay stays underneath, for releases by other
//! libraries (no message), expiry of a crashed holder's key, lost messages,
//! and a queue head that is gone (a waiter that died without leaving the
//! queue is skipped by the next release, or expires with its deadline).

mod news;
pub(crate) mod queue;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use self::queue::{Place, Subscription, Wake};
use super::attempt::attempt;
use super::kind::{Kind, Line};
use super::masters::Masters;
use crate::duration::deadline_after;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::resources::Resources;
use crate::metrics;
use crate::options::LockOptions;
use crate::random;

/// Takes the lock on `resources`, retrying until it succeeds or the wait
/// ([`LockOptions::wait`]) or attempt budget ([`LockOptions::max_attempts`])
/// runs out; the last attempt's error then.
pub(crate) async fn lock(
    masters: &Arc<Masters>,
    options: &LockOptions,
    resources: &Resources,
    ttl: Duration,
) -> Result<Guard> {
    let mut waiter = Waiter {
        masters,
        options,
        resources,
        ttl,
        deadline: deadline_after(options.wait),
        attempts: 0,
        line: InLine::NotYet,
        woken: Woken::Polled,
    };
    loop {
        let started = Instant::now();
        let result = waiter.attempt().await;
        metrics::attempt(started.elapsed(), &result);
        let error = match result {
            Ok(guard) => return Ok(guard.with_attempts(waiter.attempts)),
            Err(error) => error,
        };
        if waiter.gives_up(&error) {
            return Err(error);
        }
        waiter.wait_after(&error).await;
    }
}

/// One caller waiting for a lock.
struct Waiter<'a> {
    masters: &'a Arc<Masters>,
    options: &'a LockOptions,
    resources: &'a Resources,
    ttl: Duration,
    deadline: Instant,
    attempts: u32,
    line: InLine,
    /// What ended the last wait.
    woken: Woken,
}

/// How a waiter stands in line.
enum InLine {
    /// No refusal yet: neither listening for releases nor queued.
    NotYet,
    /// Listening; its attempts carry its place, so that the acquire request
    /// itself queues it where the resource is held (one resource, plain or
    /// fenced).
    InAttempts(Subscription),
    /// Listening, and queued with a request of its own (several resources).
    Registered(Subscription),
}

/// What ended a waiter's wait.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// A release named this waiter (and took it off that node's queue).
    Named,
    /// The retry delay passed, or the client is closing.
    Polled,
}

impl Waiter<'_> {
    async fn attempt(&mut self) -> Result<Guard> {
        self.attempts += 1;
        // Also after a named wake-up: if this attempt loses, the same request
        // puts the waiter back in its old place.
        let place = match &mut self.line {
            InLine::InAttempts(subscription) => subscription
                .entry()
                .map(|entry| Arc::new(Place::new(&self.masters.quorum, entry))),
            InLine::NotYet | InLine::Registered(_) => None,
        };
        let carried = place.is_some();
        let kind = Kind::new(self.options.fenced, place.map(|place| place as Arc<dyn Line>));
        let guard = attempt(self.masters, self.options, self.resources, self.ttl, kind).await?;
        // Off every queue: an attempt that carried the waiter's place left
        // them itself, and the releases that named this waiter popped it.
        if let InLine::InAttempts(subscription) | InLine::Registered(subscription) = &mut self.line
            && (carried || self.woken == Woken::Named)
        {
            subscription.served();
        }
        Ok(guard)
    }

    /// Whether `error` ends the wait: bad input, a shut-down client, or the
    /// budget is spent.
    fn gives_up(&self, error: &Error) -> bool {
        matches!(error, Error::Config(_) | Error::Closed)
            || self.options.max_attempts.is_some_and(|max| self.attempts >= max)
            || Instant::now() >= self.deadline
    }

    /// Waits before the next attempt: not at all on the first contention
    /// (the waiter gets in line and tries once more at once, since the
    /// release may have come before it listened), else until a release names
    /// it, the jittered retry delay passes or the client shuts down.
    async fn wait_after(&mut self, error: &Error) {
        if matches!(error, Error::Held { .. }) && matches!(self.line, InLine::NotYet) {
            self.line = self.get_in_line().await;
            return;
        }
        if let InLine::Registered(subscription) = &mut self.line
            && self.woken == Woken::Named
        {
            // Named by a release, but someone else got there first: back to
            // our old place at the front of the queue.
            subscription.register().await;
        }
        let delay = random::jitter(self.options.retry_delay);
        tracing::debug!(attempts = self.attempts, ?delay, %error, "lock attempt failed, waiting");
        let wake = deadline_after(delay).min(self.deadline);
        let closing = self.masters.quorum.tasks.closing();
        // A shutdown ends the wait at once: the next attempt says so.
        self.woken = match &mut self.line {
            InLine::InAttempts(subscription) | InLine::Registered(subscription) => {
                tokio::select! {
                    // Ready branches are taken in the order written: a simulated run
                    // replays the same for the same seed (the `sim` feature).
                    biased;
                    () = tokio::time::sleep_until(wake) => Woken::Polled,
                    woken = subscription.woken() => match woken {
                        Wake::Named => Woken::Named,
                        // Retry at once, as after a poll.
                        Wake::Subscribed => Woken::Polled,
                    },
                    () = closing.cancelled() => Woken::Polled,
                }
            }
            InLine::NotYet => {
                tokio::select! {
                    // Ready branches are taken in the order written: a simulated run
                    // replays the same for the same seed (the `sim` feature).
                    biased;
                    () = tokio::time::sleep_until(wake) => {}
                    () = closing.cancelled() => {}
                }
                Woken::Polled
            }
        };
    }

    /// Listens for releases and gets in line: a waiter on one resource in
    /// its attempts' own requests, one on several with a registration.
    async fn get_in_line(&self) -> InLine {
        let masters = self.masters;
        let mut joined = masters
            .handoff
            .subscribe(
                &masters.quorum,
                self.resources.names(),
                masters.quorum.node_timeout,
                self.deadline,
            )
            .await;
        if self.resources.names().len() == 1 {
            InLine::InAttempts(joined)
        } else {
            joined.register().await;
            InLine::Registered(joined)
        }
    }
}
