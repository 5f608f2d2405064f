//! [`Redlock::inspect`], `unlock` and `force_unlock` on an etcd cluster:
//! one member (the cluster) whose line of keys says who holds the lock.

use tokio::time::Instant;

use super::cluster::{self, Holder};
use super::{Inspection, UnlockReport};
#[cfg(doc)]
use crate::Redlock;
use crate::backend::etcd::{self, Store};

/// The cluster's line for `resource`, as an inspection of one member.
pub(super) async fn inspect(store: &Store, resource: String) -> Inspection {
    let started = Instant::now();
    let line = etcd::look(store, &resource).await;
    let elapsed = started.elapsed();
    let line = line.map(|line| {
        line.holder.map(|holder| Holder {
            valid_for: holder
                .ttl
                .saturating_sub(elapsed)
                .saturating_sub(store.lease(started, holder.ttl).drift),
            token: holder.token,
            ttl: holder.ttl,
            waiters: line.waiters,
        })
    });
    cluster::inspection(store.url.redacted(), resource, elapsed, line)
}

/// Deletes the holder's key of `resource` when its token is `token` (any
/// holder when `None`): the next in line holds the lock then.
pub(super) async fn unlock(store: &Store, resource: String, token: Option<&str>) -> UnlockReport {
    let deleted = etcd::delete_holder(store, &resource, token).await;
    cluster::unlock_report(store.url.redacted(), resource, deleted)
}
