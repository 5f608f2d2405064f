//! A held ZooKeeper lock's nodes: checking that they are still ours, and
//! deleting them (release), in the foreground or in the background.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Client, MultiReadResult};

use super::line::line;
use super::{Ensemble, ZkResult};
use crate::config::zookeeper::ZK_RETRY;
use crate::error::Result;
use crate::lock::state::Held;

/// Our node on one resource.
#[derive(Clone, Debug)]
pub(crate) struct Owned {
    /// Its full path: `<chroot>/<resource>/<token>__lock__<sequence>`.
    pub(crate) path: String,
    /// Its creation zxid: the proof that the node is still the one we
    /// created (a path is never reused while its parent lives, but a parent
    /// deleted and created again restarts its sequence).
    pub(crate) czxid: i64,
}

/// The nodes of one lock.
#[derive(Debug)]
pub(crate) struct Nodes {
    pub(crate) owned: Vec<Owned>,
}

impl Nodes {
    /// Whether every node still exists as created, read in one request
    /// (one snapshot of the server's state).
    pub(crate) async fn all_present(
        &self,
        store: &Ensemble,
        client: &Client,
        deadline: Instant,
    ) -> ZkResult<bool> {
        let mut reader = client.new_multi_reader();
        for own in &self.owned {
            reader.add_get_data(&own.path)?;
        }
        let results = store.call_by(deadline, reader.commit()).await?;
        Ok(results.len() == self.owned.len()
            && results.iter().zip(&self.owned).all(|(result, own)| {
                matches!(result, MultiReadResult::Data { stat, .. } if stat.czxid == own.czxid)
            }))
    }
}

/// Gives the lock back: deletes its nodes (the next in line of each
/// resource holds it then). A node already gone counts as deleted.
///
/// A deletion that fails (the connection moving to another server, an
/// election) is the caller's error, and is tried again in the background
/// until the session would have expired anyway: the lock is free as soon as
/// the ensemble serves again.
pub(crate) async fn give_back(store: &Arc<Ensemble>, held: &Held, nodes: &Arc<Nodes>) -> Result<()> {
    held.mark_released();
    if let Err(error) = delete(store, nodes).await {
        let retry_for = store
            .client()
            .await
            .map_or(store.url.session_timeout, |c| c.session_timeout());
        delete_in_background(store, nodes, retry_for);
        return Err(error);
    }
    Ok(())
}

/// Deletes every node of `nodes` that still exists.
pub(crate) async fn delete(store: &Ensemble, nodes: &Nodes) -> Result<()> {
    let client = store.client().await?;
    for own in &nodes.owned {
        match store.call(client.delete(&own.path, None)).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            Err(error) => return Err(store.failed(&error)),
        }
    }
    Ok(())
}

/// Deletes `nodes` in the background, as tracked work, trying again every
/// [`ZK_RETRY`] for up to `retry_for` (after which the session that owns
/// them has expired, or a new one was opened and they are gone with the
/// old); never blocks. Without a runtime the nodes end with the session.
pub(crate) fn delete_in_background(store: &Arc<Ensemble>, nodes: &Arc<Nodes>, retry_for: Duration) {
    let (task_store, nodes) = (Arc::clone(store), Arc::clone(nodes));
    store.state.retry_in_background(
        ZK_RETRY,
        retry_for,
        "ZooKeeper lock release failed; its nodes end with the session".into(),
        move || {
            let (store, nodes) = (Arc::clone(&task_store), Arc::clone(&nodes));
            async move { delete(&store, &nodes).await }
        },
    );
}

/// Deletes, in the background and as tracked work, every node named after
/// `token` under `parents`: the nodes of an attempt that did not succeed,
/// including one whose create was answered by nothing (a lost connection,
/// a timeout) and so may exist unknown to the attempt. Listing after the
/// create on the same session sees it, because a session's requests are
/// served in the order sent. Tried again every [`ZK_RETRY`] for up to
/// `retry_for`; never blocks.
pub(crate) fn delete_by_token(
    store: &Arc<Ensemble>,
    parents: Vec<String>,
    token: String,
    retry_for: Duration,
) {
    let task_store = Arc::clone(store);
    let (parents, token): (Arc<[String]>, Arc<str>) = (parents.into(), token.into());
    store.state.retry_in_background(
        ZK_RETRY,
        retry_for,
        "ZooKeeper cleanup of a failed attempt failed; its nodes end with the session".into(),
        move || {
            let (store, parents, token) = (Arc::clone(&task_store), Arc::clone(&parents), Arc::clone(&token));
            async move { delete_named(&store, &parents, &token).await }
        },
    );
}

/// Deletes every contender node under `parents` whose name starts with `token`.
async fn delete_named(store: &Ensemble, parents: &[String], token: &str) -> Result<()> {
    let client = store.client().await?;
    for parent in parents {
        let line = line(store, &client, parent).await?;
        for name in line.contenders.iter().filter(|name| name.starts_with(token)) {
            match store.call(client.delete(&format!("{parent}/{name}"), None)).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                Err(error) => return Err(store.failed(&error)),
            }
        }
    }
    Ok(())
}
