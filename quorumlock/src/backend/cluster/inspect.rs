//! [`Redlock::inspect`], `unlock` and `force_unlock` on a store that counts
//! as one member (an etcd cluster, a ZooKeeper ensemble): the reports made
//! from what its line of contenders says.

use std::time::Duration;

#[cfg(doc)]
use crate::Redlock;
use crate::error::NodeErrorKind;
use crate::lock::inspection::{
    DeletedValue, Inspection, KeyState, NodeInspection, NodeUnlock, UnlockOutcome, UnlockReport, Verdict,
};

/// The holder of a line, as its store shows it.
pub(crate) struct Seen {
    pub(crate) token: String,
    /// What the store says is left of the holder's lock (zero where the
    /// lock has no time of its own, as a ZooKeeper node in a session).
    pub(crate) ttl: Duration,
    /// What is certain of it: the ttl less the read's time and the drift.
    pub(crate) valid_for: Duration,
    /// Contenders behind it.
    pub(crate) waiters: u64,
}

/// The inspection of `resource` on the store named `node`, from what the
/// read of its line found (`None`: nobody holds it).
pub(crate) fn inspection(
    node: String,
    resource: String,
    elapsed: Duration,
    line: Result<Option<Seen>, NodeErrorKind>,
) -> Inspection {
    let (state, waiters, verdict) = match line {
        Ok(Some(holder)) => {
            let verdict = Verdict::Held {
                token: holder.token.clone(),
                valid_for: holder.valid_for,
            };
            let state = KeyState::Held {
                token: holder.token,
                ttl: holder.ttl,
            };
            (state, Some(holder.waiters), verdict)
        }
        Ok(None) => (KeyState::Free, Some(0), Verdict::Free),
        Err(kind) => (KeyState::Failed(kind), None, Verdict::Indeterminate),
    };
    Inspection {
        resource,
        nodes: vec![NodeInspection { node, state, waiters }],
        quorum: 1,
        elapsed,
        verdict,
    }
}

/// The report of an unlock of `resource` on the store named `node`: the
/// token deleted, or `None` when nobody (or another token) held it.
pub(crate) fn unlock_report(
    node: String,
    resource: String,
    deleted: Result<Option<String>, NodeErrorKind>,
) -> UnlockReport {
    let outcome = match deleted {
        Ok(Some(token)) => UnlockOutcome::Deleted(DeletedValue::String(token)),
        Ok(None) => UnlockOutcome::NotHeld,
        Err(kind) => UnlockOutcome::Failed(kind),
    };
    UnlockReport {
        resource,
        nodes: vec![NodeUnlock { node, outcome }],
        quorum: 1,
    }
}
