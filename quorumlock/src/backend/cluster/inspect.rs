//! [`Redlock::inspect`], `unlock` and `force_unlock` on a store that counts
//! as one member (an etcd cluster, a ZooKeeper ensemble): the reports made
//! from what its line of contenders says. Each store reads its line and
//! deletes a holder in its own way ([`Inspect`]); the rest is here.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

#[cfg(doc)]
use crate::Redlock;
use crate::error::{Error, NodeErrorKind, StoreFailure};
use crate::lock::inspection::{
    DeletedValue, Inspection, KeyState, NodeInspection, NodeUnlock, UnlockOutcome, UnlockReport, Verdict,
};

/// The first in a line of contenders: the lock's holder.
#[derive(Clone, Debug)]
pub(crate) struct Holder<Key> {
    /// The holder's token as the store shows it (for holders that are not
    /// quorumlock, what stands in for one: `etcdctl lock`'s lease id,
    /// kazoo's uuid).
    pub(crate) token: String,
    /// What the store says is left of the holder's lock (zero where the
    /// lock has no time of its own, as a ZooKeeper node in a session).
    pub(crate) ttl: Duration,
    /// Where the store keeps it: what a deletion of exactly this holder
    /// names.
    pub(crate) key: Key,
}

/// The line of one resource as a read found it: its holder, and how many
/// wait behind it.
#[derive(Clone, Debug)]
pub(crate) struct LineView<Key> {
    pub(crate) holder: Option<Holder<Key>>,
    pub(crate) waiters: u64,
}

impl<Key> LineView<Key> {
    /// A line of `contenders`, the first of them `holder` (`None` when the
    /// line is empty).
    pub(crate) fn new(holder: Option<Holder<Key>>, contenders: usize) -> Self {
        LineView {
            holder,
            waiters: u64::try_from(contenders.saturating_sub(1)).unwrap_or(u64::MAX),
        }
    }
}

/// What [`inspect`] and [`unlock`] need of a store.
pub(crate) trait Inspect: Sync {
    /// What names one holder's key or node.
    type Key: Send + Sync;

    /// The store as the reports name it: its URL, without a password.
    fn name(&self) -> String;

    /// The drift allowance for a lock of `ttl`.
    fn drift(&self, ttl: Duration) -> Duration;

    /// Reads the line of `resource`.
    fn look<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<LineView<Self::Key>, NodeErrorKind>>;

    /// Deletes `holder`'s key or node, and nothing else: a holder that
    /// changed since the read stays. Whether it was deleted.
    fn delete<'a>(&'a self, holder: &'a Holder<Self::Key>) -> BoxFuture<'a, Result<bool, NodeErrorKind>>;
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

/// The store's line for `resource`, as an inspection of one member; what
/// is certain of the holder's lock is its ttl less the read's time and the
/// drift.
pub(crate) async fn inspect<S: Inspect>(store: &S, resource: String) -> Inspection {
    let started = Instant::now();
    let line = store.look(&resource).await;
    let elapsed = started.elapsed();
    let (state, waiters, verdict) = match line {
        Ok(LineView {
            holder: Some(holder),
            waiters,
        }) => {
            let verdict = Verdict::Held {
                token: holder.token.clone(),
                valid_for: holder
                    .ttl
                    .saturating_sub(elapsed)
                    .saturating_sub(store.drift(holder.ttl)),
            };
            let state = KeyState::Held {
                token: holder.token,
                ttl: holder.ttl,
            };
            (state, Some(waiters), verdict)
        }
        Ok(LineView { holder: None, .. }) => (KeyState::Free, Some(0), Verdict::Free),
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
pub(crate) async fn unlock<S: Inspect>(store: &S, resource: String, token: Option<&str>) -> UnlockReport {
    let deleted = async {
        let line = store.look(&resource).await?;
        let Some(holder) = line.holder.filter(|h| token.is_none_or(|t| t == h.token)) else {
            return Ok(None);
        };
        Ok(store.delete(&holder).await?.then_some(holder.token))
    };
    let outcome = match deleted.await {
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
