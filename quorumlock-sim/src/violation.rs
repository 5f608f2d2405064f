//! What a run's checks find: each broken property, with what shows it.

use std::fmt;

/// A broken safety property, with what shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two holds worked on one resource at once.
    Overlap {
        resource: String,
        first: String,
        second: String,
    },
    /// A hold granted before another was asked for has a fence not below it.
    FenceOrder {
        resource: String,
        earlier: String,
        later: String,
    },
    /// A lock key left on a node after every client shut down in a run with
    /// no faults.
    Leftover {
        node: String,
        key: String,
        value: String,
    },
    /// A client waited in vain for a lock once every fault had healed.
    NotServed { client: usize, error: String },
    /// An operation reported the nodes unreachable that the faults do not
    /// account for (see `outages`).
    FalseUnreachable { outage: String, why: String },
    /// A client's shutdown did not finish its work.
    Shutdown { client: usize, report: String },
    /// A lock key stayed on a node longer than the work that removes it
    /// takes with no faults: a given-back lock's, or a refused attempt's.
    Stale {
        node: String,
        key: String,
        whose: String,
        for_ms: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                resource,
                first,
                second,
            } => {
                write!(f, "two holders of {resource} at once: {first} and {second}")
            }
            Violation::FenceOrder {
                resource,
                earlier,
                later,
            } => {
                write!(
                    f,
                    "fence order broken on {resource}: {earlier} was granted before {later} asked"
                )
            }
            Violation::Leftover { node, key, value } => {
                write!(
                    f,
                    "{node} kept lock key {key} = {value} after every client shut down"
                )
            }
            Violation::Shutdown { client, report } => {
                write!(f, "client {client} shut down incompletely: {report}")
            }
            Violation::NotServed { client, error } => {
                write!(
                    f,
                    "client {client} was not served once the faults healed: {error}"
                )
            }
            Violation::FalseUnreachable { outage, why } => {
                write!(f, "{outage} reported the nodes unreachable, but {why}")
            }
            Violation::Stale {
                node,
                key,
                whose,
                for_ms,
            } => {
                write!(
                    f,
                    "{node} kept lock key {key} of {whose} for {for_ms} ms with no fault"
                )
            }
        }
    }
}
