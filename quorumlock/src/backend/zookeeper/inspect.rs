//! What a ZooKeeper ensemble holds for a lock, and clearing it: the
//! ZooKeeper side of `Redlock::inspect`, `unlock` and `force_unlock`.

use std::time::Duration;

use super::Ensemble;
use super::line::{LOCK_MARK, line};
use crate::backend::cluster::inspect::{self as cluster, Seen};
use crate::error::{Error, NodeErrorKind};
use crate::lock::inspection::{Inspection, UnlockReport};

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

/// Deletes the holder's node of `resource` (the next in line then holds
/// it) when its token is `token` (any token when `None`). Returns the token
/// deleted, `None` when there was no holder or another token held it.
///
/// Node names carry a sequence number that the parent never hands out
/// twice, so the node read is the node deleted: a holder that changed
/// meanwhile stays.
pub(crate) async fn delete_holder(
    store: &Ensemble,
    resource: &str,
    token: Option<&str>,
) -> Result<Option<String>, NodeErrorKind> {
    let line = look(store, resource).await?;
    let Some(holder) = line.holder.filter(|h| token.is_none_or(|t| t == h.token)) else {
        return Ok(None);
    };
    let client = store.client().await.map_err(kind)?;
    match store.call(client.delete(&holder.path, None)).await {
        Ok(()) => Ok(Some(holder.token)),
        Err(zookeeper_client::Error::NoNode) => Ok(None),
        Err(error) => Err(kind(store.failed(&error))),
    }
}

/// The node error inside a store error.
fn kind(error: Error) -> NodeErrorKind {
    cluster::node_error(error, NodeErrorKind::ZooKeeper)
}

/// The ensemble's line for `resource`, as an inspection of one member. A
/// node lives as long as its session: the lock has no ttl of its own to
/// show.
pub(crate) async fn inspect(store: &Ensemble, resource: String) -> Inspection {
    let name = resource.clone();
    let look = async {
        let line = look(store, &name).await?;
        Ok(line.holder.map(|holder| Seen {
            token: holder.token,
            ttl: Duration::ZERO,
            drift: Duration::ZERO,
            waiters: line.waiters,
        }))
    };
    cluster::inspect(store.url.redacted(), resource, look).await
}

/// Deletes the holder's node of `resource` when its token is `token` (any
/// holder when `None`): the next in line holds the lock then.
pub(crate) async fn unlock(store: &Ensemble, resource: String, token: Option<&str>) -> UnlockReport {
    let name = resource.clone();
    cluster::unlock(store.url.redacted(), resource, delete_holder(store, &name, token)).await
}
