//! What all locks of one client share.

use std::sync::Arc;

use super::fence::Proposer;
use super::renew::RedlockRound;
use super::waiter::queue::Handoff;
use crate::backend::redlock::quorum::Quorum;
use tokio::time::Instant;

use super::quorum::Until;
use super::release::give_back;
use crate::backend::Released;
use crate::lock::holders::Holders;
use crate::lock::renewal::Renewal;
use crate::lock::state::Held;

/// The nodes, the renewal task, the hand-off waiters and the registry of
/// held locks of one client (and all its clones and guards).
#[derive(Debug)]
pub(crate) struct Masters {
    pub(crate) quorum: Arc<Quorum>,
    /// Every auto-renewed lock, and the renewal task.
    pub(crate) renewal: Arc<Renewal<()>>,
    /// Renewals re-create our key where a node lost it.
    heal: bool,
    pub(crate) handoff: Handoff,
    /// Every lock a guard of this client holds, for shutdown.
    pub(crate) holders: Holders,
    /// The token fenced acquires propose with their grant.
    pub(crate) proposer: Proposer,
}

impl Masters {
    /// The shared state over `quorum`; renewals heal lost keys with `heal`.
    pub(crate) fn new(quorum: Quorum, heal: bool) -> Self {
        let quorum = Arc::new(quorum);
        Masters {
            renewal: Arc::default(),
            heal,
            quorum,
            handoff: Handoff::default(),
            holders: Holders::default(),
            proposer: Proposer::default(),
        }
    }

    /// Starts renewing `held`; returns the id to unregister with.
    pub(crate) fn renew(&self, held: &Arc<Held>) -> u64 {
        self.renewal.register(held, (), || RedlockRound {
            quorum: Arc::clone(&self.quorum),
            heal: self.heal,
        })
    }

    /// Whether the client was shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.quorum.tasks.is_closed()
    }

    /// [`Redlock::shutdown`](crate::Redlock::shutdown) on Redis nodes.
    pub(crate) async fn shutdown(&self, deadline: Instant) -> Released {
        let quorum = &self.quorum;
        // First: from here on no attempt hands over a lock (see `attempt`).
        quorum.tasks.closing().cancel();
        self.handoff.leave_all(quorum, deadline).await;
        let outcomes = self
            .holders
            .give_back_all(|held, ()| async move {
                // As `Guard::release`: inside its minimum hold a lock's keys
                // are kept until it passes, never deleted early.
                let tally = give_back(quorum, &held, Some(deadline), Until::All).await.tally;
                tally.ok + tally.refused >= tally.quorum()
            })
            .await;
        (outcomes, quorum.tasks.close_and_wait(deadline).await)
    }
}
