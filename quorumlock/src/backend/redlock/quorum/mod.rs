//! The quorum layer: concurrent fan-out to all nodes, majority counting
//! ([`Tally`]), early exit and the validity arithmetic. Acquire, extend,
//! release, fencing, the hand-off queues, idempotency keys and the
//! watchdog's renewals all go through [`Quorum::gather`], so deadlines and
//! the quorum rules live in one place.

mod gather;
mod tally;

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;

use self::gather::{Answer, fan_out, gather, hand_over};
pub(crate) use self::tally::{Tally, Until, quorum};
use crate::backend::redlock::node::Node;
use crate::backend::redlock::wire::Request;
use crate::error::{NodeErrorKind, Result as LockResult};
pub(crate) use crate::lock::lease::Lease;
use crate::lock::lease::{TtlUnit, check_ttl, drift};
use crate::tasks::{BackgroundWork, Tasks};

/// The nodes of one client, the client's background work, and its timing
/// settings: everything a fan-out needs.
#[derive(Debug)]
pub(crate) struct Quorum {
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) tasks: Arc<Tasks>,
    /// How long each node has to answer one request.
    pub(crate) node_timeout: Duration,
    /// The clock drift allowance, `ttl * factor + fixed` (see [`drift`]).
    pub(crate) drift_factor: f64,
    pub(crate) drift_fixed: Duration,
}

impl Quorum {
    /// Number of configured nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether some member is a Redis Cluster, where a script may touch one
    /// hash slot only.
    pub(crate) fn one_slot(&self) -> bool {
        self.nodes.iter().any(Node::one_slot)
    }

    /// Nodes that must agree: a majority of all of them.
    pub(crate) fn majority(&self) -> usize {
        quorum(self.nodes.len())
    }

    /// The deadline of a request sent now: one node timeout away.
    pub(crate) fn deadline(&self) -> Instant {
        Instant::now() + self.node_timeout
    }

    /// See [`gather()`]: sends `op(i)` to every node `i` at once and feeds
    /// each outcome to `on_reply`.
    pub(crate) async fn gather<T, F, Fut>(
        &self,
        deadline: Instant,
        finish_by: Instant,
        op: F,
        on_reply: impl FnMut(usize, Result<T, NodeErrorKind>) -> ControlFlow<()>,
    ) where
        T: Send + 'static,
        F: FnMut(usize) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
    {
        gather(&self.nodes, &self.tasks, deadline, finish_by, op, on_reply).await;
    }

    /// See [`fan_out`]: [`Quorum::gather`] for yes/no answers, counted.
    pub(crate) async fn fan_out<A, F, Fut>(
        &self,
        deadline: Instant,
        finish_by: Instant,
        until: Until,
        op: F,
    ) -> Tally
    where
        A: Answer,
        F: FnMut(usize) -> Fut,
        Fut: Future<Output = RedisResult<A>> + Send + 'static,
    {
        fan_out(&self.nodes, &self.tasks, deadline, finish_by, until, op).await
    }

    /// Sends the same `request` to every node and counts a node's reply as
    /// a yes when `yes` says so, until the point `until` names (see
    /// [`Quorum::fan_out`]).
    pub(crate) async fn ask<R>(
        &self,
        request: &Arc<R>,
        deadline: Instant,
        finish_by: Instant,
        until: Until,
        yes: fn(&R::Reply) -> bool,
    ) -> Tally
    where
        R: Request + Send + Sync + 'static,
        R::Reply: Send,
    {
        self.fan_out(deadline, finish_by, until, |i| {
            let (nodes, request) = (Arc::clone(&self.nodes), Arc::clone(request));
            async move { Ok(nodes[i].send(&*request).await?.map(|reply| yes(&reply))) }
        })
        .await
    }

    /// Hands `request` to the nodes `which` and returns without waiting for
    /// the replies (see [`hand_over`]).
    pub(crate) async fn tell<R>(&self, which: &[usize], finish_by: Instant, request: Arc<R>)
    where
        R: Request + Send + Sync + 'static,
        R::Reply: Send + 'static,
    {
        hand_over(which.len(), &self.tasks, finish_by, |j| {
            let (nodes, request, node) = (Arc::clone(&self.nodes), Arc::clone(&request), which[j]);
            async move { nodes[node].send(&*request).await }
        })
        .await;
    }

    /// The drift allowance for `ttl` (see [`drift`]).
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        drift(ttl, self.drift_factor, self.drift_fixed)
    }

    /// How long, on our clock, keys set (or reset) with `ttl` on the nodes
    /// that confirmed in `granted` keep every other owner from a majority: until
    /// `granted + majority - nodes` of them can have forgotten the keys.
    /// A node whose clock runs at rate `r` forgets a key after `ttl / r`,
    /// so with a bare majority the fastest granting clock decides; with
    /// more grants than needed, the fastest ones may forget early without
    /// harm. Rates within the drift allowance count as 1: the allowance
    /// covers them. Without any fast node (the usual case) this is `ttl`,
    /// reached without allocating.
    pub(crate) fn life(&self, ttl: Duration, granted: &Tally) -> Duration {
        if (0..self.len()).all(|i| self.rate(i) == 1.0) {
            return ttl;
        }
        let rate = match granted.confirmed_by() {
            Some(nodes) => {
                let mut rates: Vec<f64> = nodes.map(|i| self.rate(i)).collect();
                rates.sort_by(|a, b| b.total_cmp(a));
                let forgetting = (rates.len() + self.majority()).saturating_sub(self.len()).max(1);
                rates.get(forgetting - 1).copied().unwrap_or(1.0)
            }
            // Unrecorded grants: as if the fastest node were one of a bare majority.
            None => (0..self.len()).map(|i| self.rate(i)).fold(1.0, f64::max),
        };
        ttl.div_f64(rate)
    }

    /// What a round that began at `start` and set `ttl` on the nodes that
    /// confirmed in `tally` makes ours (see [`Lease`]).
    pub(crate) fn lease(&self, start: Instant, ttl: Duration, tally: &Tally) -> Lease {
        Lease {
            start,
            ttl,
            life: self.life(ttl, tally),
            drift: self.drift(ttl),
        }
    }

    /// The measured rate of node `i`'s clock when it runs so fast that a key
    /// set there for `ttl` would be forgotten before it could do any good
    /// (within the drift allowance and one node timeout, the least validity
    /// a ttl must leave): such a node's grant does not count.
    pub(crate) fn too_fast(&self, i: usize, ttl: Duration) -> Option<f64> {
        let rate = self.rate(i);
        (rate > 1.0 && ttl.div_f64(rate) <= self.drift(ttl).saturating_add(self.node_timeout)).then_some(rate)
    }

    /// Reads, in the background, the clock of every node that answered in
    /// `answered` and whose reading is due (see
    /// [`crate::config::RATE_READ_EVERY`]): an acquisition calls it, so that
    /// a client taking locks keeps the rates of the nodes that grant known
    /// even when it never renews a lock. A node that failed is left alone (a
    /// reading would only be one more connection attempt to a dead node, in
    /// the way of the next request). Costs an atomic load per node when
    /// nothing is due.
    pub(crate) fn read_clocks(&self, answered: &Tally) {
        let Some(confirmed) = answered.confirmed_by() else {
            return;
        };
        for i in confirmed.chain(answered.refused_by.iter().copied()) {
            if !self.nodes[i].clock_reading_due() {
                continue;
            }
            let (nodes, deadline) = (Arc::clone(&self.nodes), self.deadline());
            self.tasks
                .spawn_if_running(BackgroundWork::ClockReading, async move {
                    let read = tokio::time::timeout_at(deadline, nodes[i].read_clock()).await;
                    if let Ok(Err(error)) = read {
                        tracing::trace!(node = nodes[i].name(), %error, "clock reading failed");
                    }
                });
        }
    }

    /// Node `i`'s clock rate as the validity counts it: its measured upper
    /// bound above the drift allowance, 1 within it or while unknown.
    fn rate(&self, i: usize) -> f64 {
        match self.nodes[i].clock_rate() {
            Some(rate) if rate > 1.0 + self.drift_factor => rate,
            _ => 1.0,
        }
    }

    /// The ttl rule ([`check_ttl`]) on Redis nodes: whole milliseconds,
    /// and room for the per-node timeout.
    pub(crate) fn check_ttl(&self, requested: Duration, min_validity: Duration) -> LockResult<Duration> {
        check_ttl(
            requested,
            TtlUnit::MILLIS,
            self.node_timeout,
            |ttl| self.drift(ttl),
            min_validity,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority_of_all_nodes() {
        assert_eq!((1..=7).map(quorum).collect::<Vec<_>>(), vec![1, 2, 2, 3, 3, 4, 4]);
        for n in 1..=50 {
            // Two quorums always intersect.
            assert!(2 * quorum(n) > n);
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms_by_default() {
        let d = drift(
            Duration::from_secs(30),
            crate::config::DEFAULT_DRIFT_FACTOR,
            crate::config::DEFAULT_DRIFT_FIXED,
        );
        assert_eq!(d, Duration::from_millis(302));
    }
}
