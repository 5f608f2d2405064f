//! [`Redlock::inspect`], `unlock` and `force_unlock` on a store that counts
//! as one member (an etcd cluster, a ZooKeeper ensemble): the reports made
//! from what its line of contenders says.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

#[cfg(doc)]
use crate::Redlock;
use crate::error::{Error, NodeErrorKind, StoreFailure};
use crate::lock::inspection::{
    DeletedValue, Inspection, KeyState, NodeInspection, NodeUnlock, UnlockOutcome, UnlockReport, Verdict,
};

/// The line of one resource as a read found it: its holder (the store's
/// own view of it), and how many wait behind it.
#[derive(Clone, Debug)]
pub(crate) struct LineView<Head> {
    pub(crate) holder: Option<Head>,
    pub(crate) waiters: u64,
}

impl<Head> LineView<Head> {
    /// The line of `contenders` in order, the first holding the lock
    /// (`None` when the line is empty).
    pub(crate) fn new(holder: Option<Head>, contenders: usize) -> Self {
        LineView {
            holder,
            waiters: u64::try_from(contenders.saturating_sub(1)).unwrap_or(u64::MAX),
        }
    }
}

/// The holder of a line, as its store shows it.
pub(crate) struct Seen {
    pub(crate) token: String,
    /// What the store says is left of the holder's lock (zero where the
    /// lock has no time of its own, as a ZooKeeper node in a session).
    pub(crate) ttl: Duration,
    /// The drift allowance for that ttl: what is certain of the lock is the
    /// ttl less the read's time and this.
    pub(crate) drift: Duration,
    /// Contenders behind it.
    pub(crate) waiters: u64,
}

/// The node error inside a store error that an inspection met: the
/// member's own error where the store gave one, else the store's failure
/// in its own words (`store` wraps it: `NodeErrorKind::Etcd`, ...).
pub(crate) fn node_error(error: Error, store: fn(StoreFailure) -> NodeErrorKind) -> NodeErrorKind {
    match error {
        Error::Unreachable { mut errors, .. } if !errors.is_empty() => errors.swap_remove(0).kind,
        other => store(StoreFailure::caused_by("inspect", other)),
    }
}

/// The inspection of `resource` on the store named `node`: `look` reads
/// its line (`None`: nobody holds it), and the read's time is taken off
/// what is certain of the holder's lock.
pub(crate) async fn inspect(
    node: String,
    resource: String,
    look: impl Future<Output = Result<Option<Seen>, NodeErrorKind>>,
) -> Inspection {
    let started = Instant::now();
    let line = look.await;
    let elapsed = started.elapsed();
    let (state, waiters, verdict) = match line {
        Ok(Some(holder)) => {
            let verdict = Verdict::Held {
                token: holder.token.clone(),
                valid_for: holder.ttl.saturating_sub(elapsed).saturating_sub(holder.drift),
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

/// The report of an unlock of `resource` on the store named `node`:
/// `delete` deletes the holder and answers the token deleted, or `None`
/// when nobody (or another token) held it.
pub(crate) async fn unlock(
    node: String,
    resource: String,
    delete: impl Future<Output = Result<Option<String>, NodeErrorKind>>,
) -> UnlockReport {
    let outcome = match delete.await {
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
