//! A guard's Redlock lock: its registrations with the client's holders and
//! watchdog, and extend and release over the nodes.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::masters::Masters;
use super::quorum::Until;
use super::release::{give_back, release_in_background, report};
use super::wire::lock::Extend;
use super::wire::millis;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::hold::Hold;
use crate::lock::report::ReleaseReport;
use crate::lock::state::Held;

/// What a guard of a Redlock lock holds besides the lock's state.
#[derive(Debug)]
pub(crate) struct RedlockHold {
    masters: Arc<Masters>,
    /// Registration with the client's holders (see `Holders`).
    holder: Option<u64>,
    /// Registration with the watchdog, when auto-renewed.
    renewal: Option<u64>,
}

/// The guard of a fresh lock; registered with the watchdog when `renew`.
pub(crate) fn guard(masters: &Arc<Masters>, held: Held, renew: bool, min_validity: Duration) -> Guard {
    let held = Arc::new(held);
    let hold = RedlockHold {
        masters: Arc::clone(masters),
        holder: Some(masters.holders.insert(&held, ())),
        renewal: renew.then(|| masters.renew(&held)),
    };
    Guard::new(held, Box::new(hold), min_validity)
}

impl RedlockHold {
    /// Resets the keys' ttl on every node that still holds our token (see
    /// [`Guard::extend`]).
    async fn extend_on_nodes(&self, held: &Held, ttl: Duration, min_validity: Duration) -> Result<()> {
        let quorum = &self.masters.quorum;
        let ttl = quorum.check_ttl(ttl, min_validity)?;
        if self.masters.is_closed() {
            return Err(Error::Closed);
        }
        let start = Instant::now();
        let valid_until = held.valid_until();
        if held.is_lost() || start >= valid_until {
            return Err(self.lost_error(0));
        }
        // Confirmations count only if they arrive while the lock is still ours.
        let deadline = (start + quorum.node_timeout).min(valid_until);
        let extend = Arc::new(Extend {
            keys: Arc::clone(held.resources.keys()),
            token: Arc::clone(&held.token),
            ttl_ms: millis(ttl),
        });
        let tally = quorum
            .ask(&extend, deadline, deadline, Until::Decided, |extended| *extended)
            .await;
        if !tally.reached() {
            tracing::debug!(resources = ?held.resources.names(), ?tally, "extend failed");
            return Err(if tally.refused_by_majority() {
                self.lost_error(tally.ok)
            } else {
                tally.unreachable()
            });
        }
        let lease = quorum.lease(start, ttl, &tally);
        let left = lease.left(min_validity)?;
        if !held.confirm(&lease, tally.ok) {
            return Err(self.lost_error(tally.ok));
        }
        tracing::debug!(resources = ?held.resources.names(), ?left, "lock extended");
        Ok(())
    }
}

impl Hold for RedlockHold {
    fn round(&self) -> Duration {
        self.masters.quorum.node_timeout
    }

    fn is_closed(&self) -> bool {
        self.masters.is_closed()
    }

    fn lost_error(&self, confirmed: usize) -> Error {
        if self.masters.is_closed() {
            return Error::Closed;
        }
        Error::Lost {
            confirmed,
            quorum: self.masters.quorum.majority(),
            nodes: self.masters.quorum.len(),
        }
    }

    fn extend<'a>(
        &'a self,
        held: &'a Held,
        ttl: Duration,
        min_validity: Duration,
    ) -> BoxFuture<'a, Result<()>> {
        self.extend_on_nodes(held, ttl, min_validity).boxed()
    }

    /// Sent whether or not `claimed`: the owner-checked delete is harmless
    /// when the keys are gone, and a lost lock's keys may still be on some
    /// nodes.
    fn release<'a>(&'a self, held: &'a Held, _claimed: bool) -> BoxFuture<'a, Result<ReleaseReport>> {
        async move {
            let given = give_back(&self.masters.quorum, held, None, Until::Answered).await;
            report(given.tally, given.kept_until)
        }
        .boxed()
    }

    fn release_in_background(&self, held: &Arc<Held>) {
        release_in_background(&self.masters.quorum, held);
    }

    fn stop_renewal(&mut self) {
        if let Some(id) = self.renewal.take() {
            self.masters.renewal.unregister(id);
        }
    }

    fn unregister(&mut self) {
        if let Some(id) = self.holder.take() {
            self.masters.holders.remove(id);
        }
    }
}
