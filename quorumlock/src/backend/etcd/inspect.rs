//! What an etcd cluster holds for a lock, and clearing it: the etcd side of
//! `Redlock::inspect`, `unlock` and `force_unlock`.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::Cluster;
use crate::backend::cluster::inspect::{self as cluster, Seen};
use crate::error::{Error, NodeErrorKind};
use crate::lock::inspection::{Inspection, UnlockReport};

/// The line of one resource.
pub(crate) type LineView = cluster::LineView<Head>;

/// The oldest key of a line: the lock's holder.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    /// The holder's token: the key's value (quorumlock stores its token
    /// there), or, for holders that store none (`etcdctl lock`), the last
    /// part of the key name (their lease id in hex).
    pub(crate) token: String,
    /// What is left of the holder's lease (zero for a key without one).
    pub(crate) ttl: Duration,
    key: Vec<u8>,
    revision: i64,
}

/// Reads the line of `resource`.
pub(crate) async fn look(store: &Cluster, resource: &str) -> Result<LineView, NodeErrorKind> {
    let mut client = store.client().await.map_err(kind)?;
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let line = store
        .call(client.get(store.resource_prefix(resource), Some(options)))
        .await
        .map_err(kind)?;
    let Some(oldest) = line.kvs().first() else {
        return Ok(LineView::new(None, 0));
    };
    let ttl = if oldest.lease() == 0 {
        Duration::ZERO
    } else {
        let lease = store
            .call(client.lease_time_to_live(oldest.lease(), None))
            .await
            .map_err(kind)?;
        Duration::from_secs(lease.ttl().max(0).unsigned_abs())
    };
    let token = match oldest.value() {
        [] => {
            let name = String::from_utf8_lossy(oldest.key());
            name.rsplit('/').next().unwrap_or_default().to_owned()
        }
        value => String::from_utf8_lossy(value).into_owned(),
    };
    let head = Head {
        token,
        ttl,
        key: oldest.key().to_vec(),
        revision: oldest.create_revision(),
    };
    Ok(LineView::new(Some(head), line.kvs().len()))
}

/// Deletes the holder's key of `resource` (the next in line then holds
/// it) when its token is `token` (any token when `None`). Returns the token
/// deleted, `None` when there was no holder or another token held it.
pub(crate) async fn delete_holder(
    store: &Cluster,
    resource: &str,
    token: Option<&str>,
) -> Result<Option<String>, NodeErrorKind> {
    let line = look(store, resource).await?;
    let Some(holder) = line.holder.filter(|h| token.is_none_or(|t| t == h.token)) else {
        return Ok(None);
    };
    let mut client = store.client().await.map_err(kind)?;
    // Only the key we read: a holder that changed meanwhile stays.
    let txn = Txn::new()
        .when([Compare::create_revision(
            holder.key.clone(),
            CompareOp::Equal,
            holder.revision,
        )])
        .and_then([TxnOp::delete(holder.key.clone(), None::<DeleteOptions>)]);
    let deleted = store.call(client.txn(txn)).await.map_err(kind)?;
    Ok(deleted.succeeded().then_some(holder.token))
}

/// The node error inside a store error.
fn kind(error: Error) -> NodeErrorKind {
    cluster::node_error(error, NodeErrorKind::Etcd)
}

/// The cluster's line for `resource`, as an inspection of one member.
pub(crate) async fn inspect(store: &Cluster, resource: String) -> Inspection {
    let name = resource.clone();
    let look = async {
        let line = look(store, &name).await?;
        Ok(line.holder.map(|holder| Seen {
            drift: store.state.drift(holder.ttl),
            token: holder.token,
            ttl: holder.ttl,
            waiters: line.waiters,
        }))
    };
    cluster::inspect(store.url.redacted(), resource, look).await
}

/// Deletes the holder's key of `resource` when its token is `token` (any
/// holder when `None`): the next in line holds the lock then.
pub(crate) async fn unlock(store: &Cluster, resource: String, token: Option<&str>) -> UnlockReport {
    let name = resource.clone();
    cluster::unlock(store.url.redacted(), resource, delete_holder(store, &name, token)).await
}
