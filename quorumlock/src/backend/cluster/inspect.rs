//! [`Redlock::inspect`], `unlock` and `force_unlock` on a store that counts
//! as one member (an etcd cluster, a ZooKeeper ensemble): the reports made
//! from what its line of contenders says.

use std::time::Duration;

use futures::future::BoxFuture;
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

/// What [`inspect`] and [`unlock`] need of a store.
pub(crate) trait Inspect: Sync {
    /// The store as the reports name it: its URL, without a password.
    fn name(&self) -> String;

    /// Reads the line of `resource`: its holder (`None`: nobody holds it).
    fn holder<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<Option<Seen>, NodeErrorKind>>;

    /// Deletes the holder's key or node of `resource` (the next in line
    /// then holds it) when its token is `token` (any token when `None`).
    /// Answers the token deleted, `None` when there was no holder or
    /// another token held it.
    fn delete_holder<'a>(
        &'a self,
        resource: &'a str,
        token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, NodeErrorKind>>;
}

/// The store's line for `resource`, as an inspection of one member; the
/// read's time is taken off what is certain of the holder's lock.
pub(crate) async fn inspect(store: &impl Inspect, resource: String) -> Inspection {
    let started = Instant::now();
    let line = store.holder(&resource).await;
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
        nodes: vec![NodeInspection {
            node: store.name(),
            state,
            waiters,
        }],
        quorum: 1,
        elapsed,
        verdict,
    }
}

/// Deletes the holder of `resource` when its token is `token` (any holder
/// when `None`): the next in line holds the lock then.
pub(crate) async fn unlock(store: &impl Inspect, resource: String, token: Option<&str>) -> UnlockReport {
    let outcome = match store.delete_holder(&resource, token).await {
        Ok(Some(token)) => UnlockOutcome::Deleted(DeletedValue::String(token)),
        Ok(None) => UnlockOutcome::NotHeld,
        Err(kind) => UnlockOutcome::Failed(kind),
    };
    UnlockReport {
        resource,
        nodes: vec![NodeUnlock {
            node: store.name(),
            outcome,
        }],
        quorum: 1,
    }
}
