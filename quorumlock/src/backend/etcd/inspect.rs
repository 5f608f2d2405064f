//! What an etcd cluster holds for a lock, and clearing it: the etcd side of
//! `Redlock::inspect`, `unlock` and `force_unlock`.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use futures::FutureExt;
use futures::future::BoxFuture;

use super::Cluster;
use crate::backend::cluster::inspect::{self as cluster, Holder, Inspect, LineView};
use crate::error::{Error, NodeErrorKind};

/// An etcd key, with the revision that created it: a deletion that
/// compares the revision deletes this key and no later one of that name.
pub(crate) type Key = (Vec<u8>, i64);

impl Inspect for Cluster {
    type Key = Key;

    fn name(&self) -> String {
        self.url.redacted()
    }

    fn drift(&self, ttl: Duration) -> Duration {
        self.state.drift(ttl)
    }

    /// The oldest key under the resource's prefix holds the lock; its
    /// token is its value (quorumlock stores its token there), or, for
    /// holders that store none (`etcdctl lock`), the last part of the key
    /// name (their lease id in hex).
    fn look<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<LineView<Key>, NodeErrorKind>> {
        async move {
            let mut client = self.client().await.map_err(kind)?;
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend);
            let line = self
                .call(client.get(self.resource_prefix(resource), Some(options)))
                .await
                .map_err(kind)?;
            let Some(oldest) = line.kvs().first() else {
                return Ok(LineView::new(None, 0));
            };
            let ttl = if oldest.lease() == 0 {
                Duration::ZERO
            } else {
                let lease = self
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
            let key = (oldest.key().to_vec(), oldest.create_revision());
            Ok(LineView::new(Some(Holder { token, ttl, key }), line.kvs().len()))
        }
        .boxed()
    }

    fn delete<'a>(&'a self, holder: &'a Holder<Key>) -> BoxFuture<'a, Result<bool, NodeErrorKind>> {
        async move {
            let (key, revision) = &holder.key;
            let mut client = self.client().await.map_err(kind)?;
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, *revision)])
                .and_then([TxnOp::delete(key.clone(), None::<DeleteOptions>)]);
            let deleted = self.call(client.txn(txn)).await.map_err(kind)?;
            Ok(deleted.succeeded())
        }
        .boxed()
    }
}

/// The node error inside a store error.
fn kind(error: Error) -> NodeErrorKind {
    cluster::node_error(error, NodeErrorKind::Etcd)
}
