//! What a ZooKeeper ensemble holds for a lock, and clearing it: the
//! ZooKeeper side of `Redlock::inspect`, `unlock` and `force_unlock`.

use std::time::Duration;

use super::Ensemble;
use super::line::{LOCK_MARK, line};
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::backend::cluster::inspect::{self as cluster, Inspect, Seen};
use crate::error::{Error, NodeErrorKind};

/// The line of one resource.
pub(crate) type LineView = cluster::LineView<Head>;

/// The first node of a line: the lock's holder.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    /// The holder's token: the part of its node's name before `__lock__`
    /// (quorumlock's token; kazoo's uuid).
    pub(crate) token: String,
    path: String,
}

/// Reads the line of `resource`.
pub(crate) async fn look(store: &Ensemble, resource: &str) -> Result<LineView, NodeErrorKind> {
    let parent = store.path(resource).map_err(kind)?;
    let client = store.client().await.map_err(kind)?;
    let line = line(store, &client, &parent).await.map_err(kind)?;
    let Some(first) = line.contenders.first() else {
        return Ok(LineView::new(None, 0));
    };
    let token = first
        .rsplit_once(LOCK_MARK)
        .map_or(first.as_str(), |(token, _)| token);
    let head = Head {
        token: token.to_owned(),
        path: format!("{parent}/{first}"),
    };
    Ok(LineView::new(Some(head), line.contenders.len()))
}

/// The node error inside a store error.
fn kind(error: Error) -> NodeErrorKind {
    cluster::node_error(error, NodeErrorKind::ZooKeeper)
}

impl Inspect for Ensemble {
    fn name(&self) -> String {
        self.url.redacted()
    }

    fn holder<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<Option<Seen>, NodeErrorKind>> {
        async move {
            let line = look(self, resource).await?;
            Ok(line.holder.map(|holder| {
                // A node lives as long as its session: the lock has no
                // ttl of its own to show.
                Seen {
                    token: holder.token,
                    ttl: Duration::ZERO,
                    drift: Duration::ZERO,
                    waiters: line.waiters,
                }
            }))
        }
        .boxed()
    }

    /// Node names carry a sequence number that the parent never hands out
    /// twice, so the node read is the node deleted: a holder that changed
    /// meanwhile stays.
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
            let client = self.client().await.map_err(kind)?;
            match self.call(client.delete(&holder.path, None)).await {
                Ok(()) => Ok(Some(holder.token)),
                Err(zookeeper_client::Error::NoNode) => Ok(None),
                Err(error) => Err(kind(self.failed(&error))),
            }
        }
        .boxed()
    }
}
