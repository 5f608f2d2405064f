//! Counting the nodes' answers: [`Tally`], and when a fan-out may stop.

use crate::backend::redlock::node::Node;
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::metrics;

/// Majority of all configured nodes: `n / 2 + 1`.
///
/// Counted over every configured node, not over the ones that answered:
/// two majorities of the same `n` always share a node, which is what keeps
/// two owners from both holding a lock.
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// When a fan-out may stop waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Until {
    /// As soon as the outcome is certain: a majority succeeded, or so many
    /// refused or failed that a majority can no longer be reached. The
    /// requests still in flight are not cancelled on the server.
    Decided,
    /// A majority answered, whatever the answer, or so many failed that a
    /// majority can no longer answer. For release, where "deleted" and
    /// "already gone" both confirm that the node holds nothing of ours: the
    /// lock is free for others once a majority confirmed, and waiting for the
    /// slowest (or a dead) node would only add its latency (up to the node
    /// timeout) to every release. The remaining requests still run, in the
    /// background (see `gather`).
    Answered,
    /// Every node answered or timed out.
    All,
}

/// The per-node outcomes of one fan-out.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Nodes that confirmed the operation.
    pub(crate) ok: usize,
    /// Which nodes those were: bit `i` for node `i` (nodes from the 128th
    /// on are not recorded; see [`Tally::confirmed_by`]).
    ok_by: u128,
    /// Nodes that answered "no" (the key is someone else's, or gone).
    pub(crate) refused: usize,
    /// Which nodes those were (by index).
    pub(crate) refused_by: Vec<usize>,
    /// Nodes that failed or timed out.
    pub(crate) errors: Vec<NodeError>,
    /// Nodes configured.
    pub(crate) nodes: usize,
}

impl Tally {
    /// No answer yet from any of `nodes`.
    pub(crate) fn new(nodes: usize) -> Self {
        Tally {
            nodes,
            ..Tally::default()
        }
    }

    /// Node `node` confirmed.
    pub(crate) fn confirm(&mut self, node: usize) {
        self.ok += 1;
        if let Some(bit) = 1u128.checked_shl(u32::try_from(node).unwrap_or(u32::MAX)) {
            self.ok_by |= bit;
        }
    }

    /// The nodes that confirmed, by index; `None` when one of them is beyond
    /// what the tally records (a quorum of more than 128 nodes).
    pub(crate) fn confirmed_by(&self) -> Option<impl Iterator<Item = usize> + '_> {
        // One step per confirming node (the lowest set bit, then cleared),
        // not one per bit: every acquisition walks this.
        (self.ok == self.ok_by.count_ones() as usize).then(|| {
            let mut left = self.ok_by;
            std::iter::from_fn(move || {
                let node = (left != 0).then(|| left.trailing_zeros() as usize)?;
                left &= left - 1;
                Some(node)
            })
        })
    }

    /// Node `node` answered "no".
    pub(crate) fn refuse(&mut self, node: usize) {
        self.refused += 1;
        self.refused_by.push(node);
    }

    pub(crate) fn quorum(&self) -> usize {
        quorum(self.nodes)
    }

    pub(crate) fn reached(&self) -> bool {
        self.ok >= self.quorum()
    }

    /// Refusals alone rule out a majority: the resource belongs to someone
    /// else (acquire) or is no longer ours (extend), whatever the failing
    /// nodes would have said.
    pub(crate) fn refused_by_majority(&self) -> bool {
        self.refused > self.nodes - self.quorum()
    }

    /// Failures alone rule out a majority: an outage, whatever the other
    /// nodes said. A failed acquisition that is not one is busy (see
    /// [`Error::Held`]).
    pub(crate) fn failures_rule_out_majority(&self) -> bool {
        self.errors.len() > self.nodes - self.quorum()
    }

    /// Whether a fan-out that runs until `until` may stop now.
    pub(crate) fn done(&self, until: Until) -> bool {
        match until {
            Until::Decided => self.decided(),
            Until::Answered => self.answered(),
            Until::All => false,
        }
    }

    fn decided(&self) -> bool {
        self.reached() || self.refused + self.errors.len() > self.nodes - self.quorum()
    }

    fn answered(&self) -> bool {
        self.ok + self.refused >= self.quorum() || self.errors.len() > self.nodes - self.quorum()
    }

    pub(crate) fn fail(&mut self, node: &Node, kind: NodeErrorKind) {
        metrics::node_error(node.name(), &kind);
        tracing::debug!(node = node.name(), error = ?kind, "node failed");
        self.errors.push(NodeError {
            node: node.name().to_owned(),
            kind,
        });
    }

    /// The error of a round that reached no majority: [`Error::Unreachable`]
    /// when failing nodes alone ruled one out, [`Error::Held`] when another
    /// owner's keys (or, for a fence proposal, its newer fence) did.
    pub(crate) fn no_majority(self) -> Error {
        if self.failures_rule_out_majority() {
            return self.unreachable();
        }
        Error::Held {
            refused: self.refused,
            nodes: self.nodes,
            errors: self.errors,
        }
    }

    /// The error for a fan-out that did not reach a majority because nodes
    /// failed.
    pub(crate) fn unreachable(self) -> Error {
        Error::Unreachable {
            succeeded: self.ok,
            refused: self.refused,
            quorum: self.quorum(),
            nodes: self.nodes,
            errors: self.errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirming_nodes_are_listed_in_order_and_only_while_all_are_recorded() {
        let mut tally = Tally::new(130);
        for node in [127, 0, 3] {
            tally.confirm(node);
        }
        let listed: Vec<usize> = tally.confirmed_by().expect("all recorded").collect();
        assert_eq!(listed, [0, 3, 127]);
        tally.confirm(128);
        assert!(tally.confirmed_by().is_none(), "node 128 is beyond the record");
        assert_eq!(Tally::new(3).confirmed_by().expect("none").count(), 0);
    }
}
