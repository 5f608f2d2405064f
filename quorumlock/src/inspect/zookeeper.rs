//! [`Redlock::inspect`], `unlock` and `force_unlock` on a ZooKeeper
//! ensemble: one member (the ensemble) whose line of nodes says who holds
//! the lock. A node lives as long as its owner's session, so no time of the
//! holder's is certain (`ttl` and `valid_for` are zero).

use std::time::Duration;

use tokio::time::Instant;

use super::cluster::{self, Holder};
use super::{Inspection, UnlockReport};
#[cfg(doc)]
use crate::Redlock;
use crate::backend::zookeeper::{self, Store};

/// The ensemble's line for `resource`, as an inspection of one member.
pub(super) async fn inspect(store: &Store, resource: String) -> Inspection {
    let started = Instant::now();
    let line = zookeeper::look(store, &resource).await;
    let elapsed = started.elapsed();
    let line = line.map(|line| {
        line.holder.map(|holder| Holder {
            token: holder.token,
            ttl: Duration::ZERO,
            valid_for: Duration::ZERO,
            waiters: line.waiters,
        })
    });
    cluster::inspection(store.url.redacted(), resource, elapsed, line)
}

/// Deletes the holder's node of `resource` when its token is `token` (any
/// holder when `None`): the next in line holds the lock then.
pub(super) async fn unlock(store: &Store, resource: String, token: Option<&str>) -> UnlockReport {
    let deleted = zookeeper::delete_holder(store, &resource, token).await;
    cluster::unlock_report(store.url.redacted(), resource, deleted)
}
