//! [`Semaphore::acquire`](super::Semaphore::acquire): sweeps until one takes a permit or the wait runs
//! out, woken by releases where the store can tell one waiter.
//!
//! On Redis the waiter reuses the locks' hand-off ([`redlock::waiter::queue`]).
//! The permits of a semaphore share one queue of waiters (see
//! [`keys::permit`]): after the first busy sweep the waiter subscribes to
//! its client's wake-up channel and registers there once. The release of
//! any permit pops the head of that queue and wakes it, so each release
//! wakes a different waiter, first come, first served; the woken waiter
//! sweeps at once. If it loses that sweep (to a caller that did not queue),
//! it registers again with its original place, at the front; once it holds
//! a permit it leaves the queue. The jittered retry delay stays underneath,
//! as for locks: a release that announces nobody (expiry of a crashed
//! holder's key, another library, a head that was served meanwhile) is
//! found by the next poll.
//!
//! On etcd and ZooKeeper a waiter stands in one line per key, and K lines
//! at once would mean K entries to create and clean up per waiter: it
//! sweeps with `try_lock` semantics and polls at the retry delay instead.
//!
//! [`redlock::waiter::queue`]: crate::backend::redlock::waiter::queue
//! [`keys::permit`]: crate::backend::redlock::wire::keys::permit

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Permit, Semaphore, Swept};
use crate::backend::redlock::masters::Masters;
use crate::backend::redlock::waiter::queue::{Subscription, Wake};
use crate::duration::deadline_after;
use crate::error::{Error, Result};
use crate::random;

/// Takes a permit of `semaphore`, waiting as its client's options allow.
pub(super) async fn acquire(semaphore: &Semaphore, ttl: Duration) -> Result<Permit> {
    let options = &semaphore.redlock.options;
    let mut waiter = Waiter {
        semaphore,
        deadline: deadline_after(options.wait),
        sweeps: 0,
        line: Line::NotYet,
        named: false,
    };
    loop {
        waiter.sweeps += 1;
        let (error, busy) = match semaphore.sweep(ttl).await? {
            // Dropping the line leaves every queue the waiter is still in.
            Swept::Taken(permit) => return Ok(permit),
            Swept::Busy(error) => (error, true),
            Swept::Failed(error) => (error, false),
        };
        if waiter.gives_up() {
            return Err(error);
        }
        if busy && matches!(waiter.line, Line::NotYet) {
            // In line, then one more sweep at once: a release before the
            // subscription was confirmed woke nobody.
            waiter.line = waiter.get_in_line().await;
            continue;
        }
        waiter.wait(&error).await;
    }
}

/// One caller waiting for a permit.
struct Waiter<'a> {
    semaphore: &'a Semaphore,
    deadline: Instant,
    sweeps: u32,
    line: Line,
    /// The last wait ended with a release that named this waiter (and took
    /// it off that permit's queue).
    named: bool,
}

/// How a waiter stands in line.
enum Line {
    /// No busy sweep yet.
    NotYet,
    /// In the semaphore's queue (Redis).
    Queued(Subscription),
    /// On a store without the hand-off: polling.
    Polling,
}

impl Waiter<'_> {
    fn gives_up(&self) -> bool {
        let options = &self.semaphore.redlock.options;
        options.max_attempts.is_some_and(|max| self.sweeps >= max) || Instant::now() >= self.deadline
    }

    fn masters(&self) -> Option<&Arc<Masters>> {
        self.semaphore.redlock.backend.redlock("the hand-off queue").ok()
    }

    async fn get_in_line(&self) -> Line {
        let Some(masters) = self.masters() else {
            return Line::Polling;
        };
        // Any permit names the semaphore's one queue.
        let queue_of = &self.semaphore.permits[0].names()[..1];
        let quorum = &masters.quorum;
        let mut subscription = masters
            .handoff
            .subscribe(quorum, queue_of, quorum.node_timeout, self.deadline)
            .await;
        subscription.register().await;
        Line::Queued(subscription)
    }

    /// Waits before the next sweep: until a release names this waiter, the
    /// jittered retry delay passes, the wait ends or the client shuts down.
    async fn wait(&mut self, error: &Error) {
        let options = &self.semaphore.redlock.options;
        let delay = random::jitter(options.retry_delay);
        tracing::debug!(sweeps = self.sweeps, ?delay, %error, "no permit free, waiting");
        let wake = deadline_after(delay).min(self.deadline);
        let closing = self
            .masters()
            .map(|masters| masters.quorum.tasks.closing().clone());
        let Line::Queued(subscription) = &mut self.line else {
            tokio::time::sleep_until(wake).await;
            return;
        };
        if self.named {
            // Named, but another caller took the permit first: back to the
            // old place, at the front of the queue. Wake-ups that came
            // during the sweep are dropped: mostly they are the sweep's own
            // doing (an attempt granted by a minority releases its keys,
            // and that release names the head of the queue, this waiter),
            // and a waiter that honoured them would sweep on and on. A real
            // release among them names this waiter again next time, or is
            // found by the poll.
            subscription.forget_named();
            subscription.register().await;
        }
        let closing = closing.unwrap_or_default();
        // A shutdown ends the wait at once: the next sweep says so.
        self.named = tokio::select! {
            // Ready branches are taken in the order written: a simulated run
            // replays the same for the same seed (the `sim` feature).
            biased;
            () = tokio::time::sleep_until(wake) => false,
            woken = subscription.woken() => woken == Wake::Named,
            () = closing.cancelled() => false,
        };
    }
}
