//! What an etcd cluster holds for a lock, and clearing it: the etcd side of
//! `Redlock::inspect`, `unlock` and `force_unlock`.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::Cluster;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::backend::cluster::inspect::{self as cluster, Inspect, Seen};
use crate::error::{Error, NodeErrorKind};

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

/// The node error inside a store error.
fn kind(error: Error) -> NodeErrorKind {
    cluster::node_error(error, NodeErrorKind::Etcd)
}

impl Inspect for Cluster {
    fn name(&self) -> String {
        self.url.redacted()
    }

    fn holder<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<Option<Seen>, NodeErrorKind>> {
        async move {
            let line = look(self, resource).await?;
            Ok(line.holder.map(|holder| Seen {
                drift: self.state.drift(holder.ttl),
                token: holder.token,
                ttl: holder.ttl,
                waiters: line.waiters,
            }))
        }
        .boxed()
    }

    /// Only the key read is deleted (a transaction on its create
    /// revision): a holder that changed meanwhile stays.
    fn delete_holder<'a>(
        &'a self,
        resource: &'a str,
        token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, NodeErrorKind>> {
        async move {
            let line = look(self, resource).await?;
            let Some(holder) = line.holder.filter(|h| token.is_none_or(|t| t == h.token)) else {
                return Ok(None);
            };
            let mut client = self.client().await.map_err(kind)?;
            let txn = Txn::new()
                .when([Compare::create_revision(
                    holder.key.clone(),
                    CompareOp::Equal,
                    holder.revision,
                )])
                .and_then([TxnOp::delete(holder.key.clone(), None::<DeleteOptions>)]);
            let deleted = self.call(client.txn(txn)).await.map_err(kind)?;
            Ok(deleted.succeeded().then_some(holder.token))
        }
        .boxed()
    }
}
