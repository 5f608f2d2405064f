//! `Unreachable` held against the faults injected: an operation may report
//! the nodes unreachable only when the nodes that failed alone rule out a
//! majority, and only name a node as failed that a fault touched, as the
//! reporting client sees it, while the operation ran.
//!
//! A node a fault never touched answers within a few round trips, far
//! within the per-node timeout; one that is reported failed all the same
//! is a client that gives up on healthy nodes (a connection it broke
//! itself, a deadline it set wrong, a reply it lost), which no user could
//! tell from an outage.

use std::time::Duration;

use quorumlock::{Error, NodeError};

use crate::violation::Violation;

/// How long after a fault ends a request may still fail because of it:
/// a request sent into a black hole or a paused node waits out the
/// per-node timeout, and a reply already late when the link healed
/// arrives after it.
pub const FAULT_AFTERMATH: Duration = Duration::from_millis(200);

/// A fault on a node, from `from` until `until` (`None`: still on), as
/// every client sees it or only `client`.
#[derive(Clone, Debug)]
pub struct FaultSpan {
    /// The fault, as the trace shows it.
    pub what: String,
    /// Its place in the order the schedule drew faults (`None`: a fault
    /// of the scenario, there throughout).
    pub drawn: Option<usize>,
    pub node: String,
    pub client: Option<usize>,
    pub from: Duration,
    pub until: Option<Duration>,
}

/// An operation that ended with [`Error::Unreachable`].
#[derive(Clone, Debug)]
pub struct Outage {
    pub client: usize,
    /// When the operation started and when it returned.
    pub asked: Duration,
    pub reported: Duration,
    pub nodes: usize,
    pub quorum: usize,
    /// The addresses of the nodes it named as failed, with why.
    pub failed: Vec<(String, String)>,
}

impl Outage {
    /// The outage `error` reports, if it is one.
    pub fn of(error: &Error, client: usize, asked: Duration, reported: Duration) -> Option<Outage> {
        let Error::Unreachable {
            nodes,
            quorum,
            errors,
            ..
        } = error
        else {
            return None;
        };
        Some(Outage {
            client,
            asked,
            reported,
            nodes: *nodes,
            quorum: *quorum,
            failed: errors
                .iter()
                .map(|NodeError { node, kind }| (node.clone(), format!("{kind:?}")))
                .collect(),
        })
    }

    fn name(&self) -> String {
        format!(
            "client {} (asked {:?}, reported {:?})",
            self.client, self.asked, self.reported
        )
    }
}

/// Every outage that the failed nodes do not account for, or that names a
/// node no fault touched.
pub fn unjustified(outages: &[Outage], faults: &[FaultSpan]) -> Vec<Violation> {
    let mut found = Vec::new();
    for outage in outages {
        if outage.nodes - outage.failed.len() >= outage.quorum {
            found.push(Violation::FalseUnreachable {
                outage: outage.name(),
                why: format!(
                    "{} of {} nodes failed: the others could still form a majority of {}",
                    outage.failed.len(),
                    outage.nodes,
                    outage.quorum
                ),
            });
        }
        for (node, kind) in &outage.failed {
            if !faults.iter().any(|fault| touched(fault, outage, node)) {
                found.push(Violation::FalseUnreachable {
                    outage: outage.name(),
                    why: format!("{node} failed ({kind}) while no fault touched it"),
                });
            }
        }
    }
    found
}

/// Whether `fault` touched `node` for `outage`'s client while it ran (a
/// node error names `host:port/db`, a fault the address `host:port`).
fn touched(fault: &FaultSpan, outage: &Outage, node: &str) -> bool {
    let on_node = node
        .strip_prefix(fault.node.as_str())
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    on_node
        && fault.client.is_none_or(|c| c == outage.client)
        && fault.from <= outage.reported
        && fault
            .until
            .is_none_or(|until| until + FAULT_AFTERMATH >= outage.asked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn outage(failed: &[&str]) -> Outage {
        Outage {
            client: 1,
            asked: ms(1_000),
            reported: ms(1_100),
            nodes: 3,
            quorum: 2,
            failed: failed
                .iter()
                .map(|n| ((*n).to_owned(), "Timeout".to_owned()))
                .collect(),
        }
    }

    fn fault(node: &str, client: Option<usize>, from: u64, until: Option<u64>) -> FaultSpan {
        FaultSpan {
            what: String::new(),
            drawn: None,
            node: node.to_owned(),
            client,
            from: ms(from),
            until: until.map(ms),
        }
    }

    #[test]
    fn an_outage_of_faulted_nodes_that_rule_out_a_majority_is_justified() {
        let faults = [
            fault("n0:6379", None, 900, Some(1_050)),
            fault("n1:6379", Some(1), 0, None),
        ];
        let outages = [outage(&["n0:6379/0", "n1:6379/0"])];
        assert!(unjustified(&outages, &faults).is_empty());
    }

    #[test]
    fn a_healthy_node_named_failed_or_too_few_failures_are_found() {
        // n1's fault ended long before, and touched another client; n10 is
        // not n1.
        let faults = [
            fault("n0:6379", None, 0, None),
            fault("n1:6379", None, 0, Some(500)),
            fault("n1:6379", Some(2), 0, None),
            fault("n1:637", None, 0, None),
        ];
        let found = unjustified(&[outage(&["n0:6379/0", "n1:6379/0"])], &faults);
        assert_eq!(found.len(), 1, "{found:?}");
        let found = unjustified(&[outage(&["n0:6379/0"])], &faults);
        assert_eq!(found.len(), 1, "one failure leaves a majority: {found:?}");
    }
}
