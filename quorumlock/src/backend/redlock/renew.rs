//! The Redlock round of the renewal loop ([`crate::lock::renewal`]): every
//! due lock renewed at once, owner-checked, with one pipeline of renewal
//! script calls per node, so that round trips per round are O(nodes), not
//! O(locks). A lock counts as renewed only when a majority confirmed before
//! its validity ended; the new validity is measured from the round's start.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use super::quorum::{Quorum, Tally};
use super::release::release_in_background;
use super::wire::renew::{Renew, RenewItem, RenewStatus};
use crate::lock::renewal::{Outcome, Renewed, Round};
use crate::lock::state::Held;
use crate::tasks::Tasks;

/// The nodes a round goes to, and whether it heals.
#[derive(Clone, Debug)]
pub(crate) struct RedlockRound {
    pub(crate) quorum: Arc<Quorum>,
    /// Renewals re-create our key where a node lost it.
    pub(crate) heal: bool,
}

impl Round for RedlockRound {
    type Kept = ();

    fn tasks(&self) -> &Arc<Tasks> {
        &self.quorum.tasks
    }

    /// One more node timeout: several tries fit in the remaining validity
    /// (the ttl is far larger than the timeout), without hammering a
    /// struggling node.
    fn retry_delay(&self) -> Duration {
        self.quorum.node_timeout
    }

    fn renew(&self, due: &[Renewed<()>]) -> impl Future<Output = Vec<Outcome>> + Send {
        renew(self, due)
    }

    fn give_back(&self, held: &Arc<Held>, (): &()) {
        release_in_background(&self.quorum, held);
    }
}

/// One round: renews `due` on every node with one pipeline of renewal
/// script calls per node; each lock's outcome.
async fn renew(round: &RedlockRound, due: &[Renewed<()>]) -> Vec<Outcome> {
    let span = tracing::debug_span!(
        "quorumlock.renew",
        locks = due.len(),
        confirmed = Empty,
        elapsed_ms = Empty
    );
    renew_round(round, due).instrument(span).await
}

/// [`renew`]'s round, inside its span.
async fn renew_round(round: &RedlockRound, due: &[Renewed<()>]) -> Vec<Outcome> {
    let quorum = &round.quorum;
    let start = Instant::now();
    let items: Arc<[RenewItem]> = due.iter().map(|renewed| renew_item(&renewed.held)).collect();
    let calls = Arc::new(Renew::chunks(&items, round.heal, quorum.one_slot()));
    // Confirmations count only while every lock of the batch is still valid.
    let earliest = due
        .iter()
        .map(|renewed| renewed.held.valid_until())
        .min()
        .unwrap_or(start);
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
    let span = tracing::Span::current();
    span.record(
        "confirmed",
        tallies.iter().filter(|tally| tally.reached()).count(),
    );
    span.record("elapsed_ms", start.elapsed().as_millis() as u64);
    items
        .iter()
        .zip(tallies)
        .map(|(item, tally)| outcome(quorum, item.ttl, start, &tally))
        .collect()
}

/// A lock's outcome of one round that started at `start`.
fn outcome(quorum: &Quorum, ttl: Duration, start: Instant, tally: &Tally) -> Outcome {
    if tally.reached() {
        Outcome::Confirmed {
            lease: quorum.lease(start, ttl, tally),
            confirmed: tally.ok,
        }
    } else if tally.refused_by_majority() {
        Outcome::Gone("a majority of nodes holds another token")
    } else {
        Outcome::Failed {
            confirmed: tally.ok,
            error: format!("not confirmed by a majority: {tally:?}"),
        }
    }
}

/// `held` in a renewal, with its current ttl.
fn renew_item(held: &Held) -> RenewItem {
    RenewItem {
        keys: Arc::clone(held.resources.keys()),
        token: Arc::clone(&held.token),
        ttl: held.ttl(),
    }
}
