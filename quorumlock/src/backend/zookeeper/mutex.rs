//! Taking a lock on ZooKeeper: the lock recipe of the ZooKeeper
//! documentation, with nodes named and ordered as kazoo's `Lock` names and
//! orders them.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode};

use super::line::{LOCK_MARK, line};
use super::nodes::{Nodes, Owned, delete_by_token};
use super::{Ensemble, ZkResult};
use crate::backend::cluster::{self, Recipe};
use crate::config::zookeeper::ZK_WAITER_RECHECK;
use crate::error::{Error, NodeErrorKind, Result, Setting, StoreFailure};
use crate::lock::resources::Resources;
use crate::lock::state::{Granted, Held};
use crate::options::LockOptions;
use crate::random;

impl Recipe for Ensemble {
    type LockTtl = Duration;

    /// The ttl of a lock call, checked: the ttl rule, and what a ZooKeeper
    /// lock cannot be asked for.
    fn lock_ttl(&self, options: &LockOptions, ttl: Duration) -> Result<Duration> {
        let ttl = self.state.check_ttl(ttl, options.min_validity)?;
        if options.min_hold.is_some() {
            return Err(Error::config(
                Setting::MinHold,
                "a minimum hold needs lock keys that outlive the client (Redis or etcd nodes); \
                 a ZooKeeper lock's nodes end with its client's session",
            ));
        }
        Ok(ttl)
    }

    fn attempt<'a>(
        self: &'a Arc<Self>,
        options: &'a LockOptions,
        resources: &'a Resources,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<(Held, Nodes)>> {
        attempt(self, options, resources, ttl, deadline).boxed()
    }

    /// Our node vanished while we waited: the session expired.
    fn lost_in_line(&self) -> Error {
        self.unreachable(NodeErrorKind::ZooKeeper(StoreFailure::new(
            "the waiter's session expired while it waited",
        )))
    }
}

/// One attempt. Whatever it created is deleted unless it succeeds (also
/// when its future is dropped).
async fn attempt(
    store: &Arc<Ensemble>,
    options: &LockOptions,
    resources: &Resources,
    ttl: Duration,
    deadline: Option<Instant>,
) -> Result<(Held, Nodes)> {
    let client = store.client().await?;
    let token: Arc<str> = random::token().into();
    // One order for every contender of a multi-resource lock: two of them
    // never wait for each other's second resource.
    let mut names = resources.names().to_vec();
    names.sort();
    let parents = names
        .iter()
        .map(|name| store.path(name))
        .collect::<Result<Vec<_>>>()?;
    let mut undo = Undo {
        store,
        token: Arc::clone(&token),
        parents: Vec::with_capacity(parents.len()),
        armed: true,
    };
    if deadline.is_none() {
        // Without waiting, nothing joins a line: a node left in one by an
        // attempt that was refused would hold up everyone behind it until
        // its deletion.
        for parent in &parents {
            if !line(store, &client, parent).await?.contenders.is_empty() {
                return Err(cluster::held());
            }
        }
    }
    // The first create goes through the leader in our session: the lock's
    // validity counts from its sending.
    let mut sent = Instant::now();
    let (mut fence, mut waited) = (0, false);
    let mut owned = Vec::with_capacity(parents.len());
    for parent in &parents {
        // Before the create: a create that fails may still have made a node.
        undo.parents.push(parent.clone());
        let own = create(store, &client, parent, &token).await?;
        let first_seen_at = wait_first(store, &client, parent, &own, deadline, &mut waited).await?;
        fence = fence.max(first_seen_at);
        owned.push(own);
    }
    let nodes = Nodes { owned };
    if waited {
        // The session may have expired while we waited (our nodes with it),
        // and someone may have deleted a node of ours: a lock is ours only
        // with a session just confirmed through the leader and every node
        // there.
        sent = Instant::now();
        let (synced, present) = tokio::join!(
            store.call(client.sync("/")),
            nodes.all_present(store, &client, sent + store.state.request_timeout)
        );
        synced.map_err(|e| store.failed(&e))?;
        if !present.map_err(|e| store.failed(&e))? {
            return Err(store.state.lost());
        }
    }
    let lease = store.lease(&client, sent, ttl);
    lease.left(options.min_validity)?;
    undo.armed = false;
    let acquired = Granted {
        resources: resources.clone(),
        token,
        // Zxids start at 1 and only grow.
        fence: Some(fence.unsigned_abs()),
        lease,
        confirmed: 1,
    };
    Ok((Held::new(acquired, options), nodes))
}

/// Deletes the nodes of an attempt that did not succeed: every node named
/// after its token under the parents it tried to create one in.
struct Undo<'a> {
    store: &'a Arc<Ensemble>,
    token: Arc<str>,
    parents: Vec<String>,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.armed && !self.parents.is_empty() {
            let parents = std::mem::take(&mut self.parents);
            let retry_for = self.store.url.session_timeout;
            delete_by_token(self.store, parents, self.token.to_string(), retry_for);
        }
    }
}

/// Creates our ephemeral sequential node under `parent` (creating the
/// parent, as a container node that the ensemble removes once empty, when
/// it is missing).
async fn create(store: &Ensemble, client: &Client, parent: &str, token: &str) -> Result<Owned> {
    let prefix = format!("{parent}/{token}{LOCK_MARK}");
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let mut made_parent = false;
    loop {
        match store
            .call(client.create(&prefix, token.as_bytes(), &options))
            .await
        {
            Ok((stat, sequence)) => {
                return Ok(Owned {
                    path: format!("{prefix}{sequence}"),
                    czxid: stat.czxid,
                });
            }
            // The container was removed between its creation and ours, at
            // most once per attempt in practice; a second miss is an error.
            Err(zookeeper_client::Error::NoNode) if !made_parent => {
                let containers = CreateMode::Container.with_acls(Acls::anyone_all());
                store
                    .call(client.mkdir(parent, &containers))
                    .await
                    .map_err(|e| store.failed(&e))?;
                made_parent = true;
            }
            // The node may have been created: find it by our token, as
            // kazoo does, so that it does not hold up the line.
            Err(error @ (zookeeper_client::Error::ConnectionLoss | zookeeper_client::Error::Timeout)) => {
                return match find_own(store, client, parent, token).await {
                    Ok(Some(own)) => Ok(own),
                    _ => Err(store.failed(&error)),
                };
            }
            Err(error) => return Err(store.failed(&error)),
        }
    }
}

/// Our node under `parent` if a create whose answer was lost made one.
async fn find_own(store: &Ensemble, client: &Client, parent: &str, token: &str) -> Result<Option<Owned>> {
    let line = line(store, client, parent).await?;
    let Some(name) = line.contenders.into_iter().find(|name| name.starts_with(token)) else {
        return Ok(None);
    };
    let path = format!("{parent}/{name}");
    match store.call(client.check_stat(&path)).await {
        Ok(Some(stat)) => Ok(Some(Owned {
            path,
            czxid: stat.czxid,
        })),
        Ok(None) => Ok(None),
        Err(error) => Err(store.failed(&error)),
    }
}

/// Waits until `own` is the first of its line, watching only its
/// predecessor each time; without a `deadline`, a predecessor is
/// [`Error::Held`]. Returns the parent's pzxid read when `own` was first,
/// which is at least the zxid of the deletion of every earlier holder.
async fn wait_first(
    store: &Ensemble,
    client: &Client,
    parent: &str,
    own: &Owned,
    deadline: Option<Instant>,
    waited: &mut bool,
) -> Result<i64> {
    let name = own.path.rsplit('/').next().unwrap_or_default();
    loop {
        let line = line(store, client, parent).await?;
        let Some(place) = line.contenders.iter().position(|c| c == name) else {
            return Err(store.state.lost());
        };
        if place == 0 {
            return Ok(line.changed_at);
        }
        let Some(deadline) = deadline else {
            return Err(cluster::held());
        };
        let predecessor = format!("{parent}/{}", line.contenders[place - 1]);
        wait_gone(store, client, &predecessor, deadline).await?;
        *waited = true;
    }
}

/// Waits until the node `path` is gone: its watch fires, or a look every
/// [`ZK_WAITER_RECHECK`] finds it gone (a watch on a server that stopped
/// answering may never fire).
async fn wait_gone(store: &Ensemble, client: &Client, path: &str, deadline: Instant) -> Result<()> {
    loop {
        let watched: ZkResult<_> = store.call(client.check_and_watch_stat(path)).await;
        let watcher = match watched {
            Ok((None, _)) => return Ok(()),
            Ok((Some(_), watcher)) => watcher,
            Err(error) => return Err(store.failed(&error)),
        };
        tokio::select! {
            _ = watcher.changed() => {}
            () = tokio::time::sleep(ZK_WAITER_RECHECK) => {}
            () = tokio::time::sleep_until(deadline) => return Err(cluster::held()),
            () = store.state.tasks.closing().cancelled() => return Err(Error::Closed),
        }
    }
}
