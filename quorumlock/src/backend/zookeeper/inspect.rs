//! What a ZooKeeper ensemble holds for a lock, and clearing it: the
//! ZooKeeper side of `Redlock::inspect`, `unlock` and `force_unlock`.

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::Ensemble;
use super::line::{LOCK_MARK, line};
use crate::backend::cluster::inspect::{self as cluster, Holder, Inspect, LineView};
use crate::error::{Error, NodeErrorKind};

impl Inspect for Ensemble {
    /// The holder's node's path.
    type Key = String;

    fn name(&self) -> String {
        self.url.redacted()
    }

    fn drift(&self, ttl: Duration) -> Duration {
        self.state.drift(ttl)
    }

    /// The node with the lowest sequence holds the lock; its token is the
    /// part of its name before `__lock__` (quorumlock's token; kazoo's
    /// uuid). A node lives as long as its session: the lock has no ttl of
    /// its own to show.
    fn look<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<LineView<String>, NodeErrorKind>> {
        async move {
            let parent = self.path(resource).map_err(kind)?;
            let client = self.client().await.map_err(kind)?;
            let line = line(self, &client, &parent).await.map_err(kind)?;
            let Some(first) = line.contenders.first() else {
                return Ok(LineView::new(None, 0));
            };
            let token = first
                .rsplit_once(LOCK_MARK)
                .map_or(first.as_str(), |(token, _)| token);
            let holder = Holder {
                token: token.to_owned(),
                ttl: Duration::ZERO,
                key: format!("{parent}/{first}"),
            };
            Ok(LineView::new(Some(holder), line.contenders.len()))
        }
        .boxed()
    }

    /// Node names carry a sequence number that the parent never hands out
    /// twice, so the node read is the node deleted.
    fn delete<'a>(&'a self, holder: &'a Holder<String>) -> BoxFuture<'a, Result<bool, NodeErrorKind>> {
        async move {
            let client = self.client().await.map_err(kind)?;
            match self.call(client.delete(&holder.key, None)).await {
                Ok(()) => Ok(true),
                Err(zookeeper_client::Error::NoNode) => Ok(false),
                Err(error) => Err(kind(self.failed(&error))),
            }
        }
        .boxed()
    }
}

/// The node error inside a store error.
fn kind(error: Error) -> NodeErrorKind {
    cluster::node_error(error, NodeErrorKind::ZooKeeper)
}
