//! [`Redlock::inspect`], `unlock` and `force_unlock` on an etcd cluster:
//! one member (the cluster) whose line of keys says who holds the lock.

use tokio::time::Instant;

use super::{
    DeletedValue, Inspection, KeyState, NodeInspection, NodeUnlock, UnlockOutcome, UnlockReport, Verdict,
};
#[cfg(doc)]
use crate::Redlock;
use crate::etcd::{self, Store};

/// The cluster's line for `resource`, as an inspection of one member.
pub(super) async fn inspect(store: &Store, resource: String) -> Inspection {
    let started = Instant::now();
    let line = etcd::look(store, &resource).await;
    let elapsed = started.elapsed();
    let (state, waiters, verdict) = match line {
        Ok(line) => match line.holder {
            Some(holder) => {
                let drift = store.lease(started, holder.ttl).drift;
                let verdict = Verdict::Held {
                    token: holder.token.clone(),
                    valid_for: holder.ttl.saturating_sub(elapsed).saturating_sub(drift),
                };
                let state = KeyState::Held {
                    token: holder.token,
                    ttl: holder.ttl,
                };
                (state, Some(line.waiters), verdict)
            }
            None => (KeyState::Free, Some(0), Verdict::Free),
        },
        Err(kind) => (KeyState::Failed(kind), None, Verdict::Indeterminate),
    };
    Inspection {
        resource,
        nodes: vec![NodeInspection {
            node: store.url.redacted(),
            state,
            waiters,
        }],
        quorum: 1,
        elapsed,
        verdict,
    }
}

/// Deletes the holder's key of `resource` when its token is `token` (any
/// holder when `None`): the next in line holds the lock then.
pub(super) async fn unlock(store: &Store, resource: String, token: Option<&str>) -> UnlockReport {
    let outcome = match etcd::delete_holder(store, &resource, token).await {
        Ok(Some(token)) => UnlockOutcome::Deleted(DeletedValue::String(token)),
        Ok(None) => UnlockOutcome::NotHeld,
        Err(kind) => UnlockOutcome::Failed(kind),
    };
    UnlockReport {
        resource,
        nodes: vec![NodeUnlock {
            node: store.url.redacted(),
            outcome,
        }],
        quorum: 1,
    }
}
