//! Taking a lock on etcd: the recipe of clientv3's `concurrency.Mutex`, with
//! the re-check after a wait that it lacks in older releases.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchOptions,
};
use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::Cluster;
use super::keeper::{Keeper, KeptAlive};
use super::lease::{Keys, Owned, all_present, revoke_in_background};
use crate::backend::cluster::{self, Recipe};
use crate::config::RENEW_DIVISOR;
use crate::config::etcd::ETCD_RENEW_RETRY;
use crate::error::{Error, NodeErrorKind, Result, StoreFailure};
use crate::lock::resources::Resources;
use crate::lock::state::{Granted, Held};
use crate::options::LockOptions;
use crate::random;

impl Recipe for Cluster {
    type LockTtl = i64;

    /// The ttl of a lock call's lease, in whole seconds: the ttl rule for a
    /// lease (rounded up to whole seconds, room for the request timeout).
    fn lock_ttl(&self, options: &LockOptions, ttl: Duration) -> Result<i64> {
        let ttl = self.state.check_ttl(ttl, options.min_validity)?;
        // At most MAX_TTL in seconds, far below i64::MAX.
        Ok(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
    }

    fn attempt<'a>(
        self: &'a Arc<Self>,
        options: &'a LockOptions,
        resources: &'a Resources,
        ttl: i64,
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<(Held, Keys)>> {
        attempt(self, options, resources, ttl, deadline).boxed()
    }

    /// Our key vanished while we waited: the lease lapsed.
    fn lost_in_line(&self) -> Error {
        self.unreachable(NodeErrorKind::Etcd(StoreFailure::new(
            "the waiter's lease expired while it waited",
        )))
    }
}

/// One attempt under a fresh lease. Whatever it created is revoked unless
/// it succeeds (also when its future is dropped).
async fn attempt(
    store: &Arc<Cluster>,
    options: &LockOptions,
    resources: &Resources,
    ttl_seconds: i64,
    deadline: Option<Instant>,
) -> Result<(Held, Keys)> {
    let mut client = store.client().await?;
    let start = Instant::now();
    let grant = store.call(client.lease_grant(ttl_seconds, None)).await?;
    let granted = Duration::from_secs(grant.ttl().unsigned_abs());
    let lease = Undo {
        store,
        lease: grant.id(),
        ttl: granted,
        armed: true,
    };
    let mut alive = Alive {
        since: start,
        ttl: granted,
        keeper: None,
    };
    let token: Arc<str> = random::token().into();
    // One order for every contender of a multi-resource lock: two of them
    // never wait for each other's second resource.
    let mut names = resources.names().to_vec();
    names.sort();
    let (mut owned, mut revision, mut waited) = (Vec::with_capacity(names.len()), 0, false);
    let Some(deadline) = deadline else {
        // Without waiting, nothing joins a line: a key left in one by an
        // attempt that was refused would hold up everyone behind it until
        // its revoke (or its lease) ends it.
        let (owned, revision) = take_if_free(store, &mut client, names, &token, lease.lease).await?;
        return finish(store, options, resources, token, (owned, revision), lease, alive);
    };
    for resource in names {
        let key = store.key(&resource, lease.lease);
        let prefix = store.resource_prefix(&resource);
        let place = take_place(store, &mut client, &key, &token, lease.lease, &prefix).await?;
        if !place.first {
            let line = Line {
                store,
                prefix: &prefix,
                own: place.created,
                deadline,
            };
            line.wait(&mut client, lease.lease, &mut alive).await?;
            waited = true;
        }
        revision = revision.max(place.seen_at);
        owned.push(Owned {
            resource,
            key,
            revision: place.created,
        });
    }
    if waited {
        // The lease may have lapsed while we waited (the key with it), and
        // someone may have deleted a key of ours: a lock is ours only with
        // a lease that a keep-alive just confirmed and every key first.
        alive.confirm(store, lease.lease).await?;
        revision = confirm_first(store, &mut client, &owned).await?;
    }
    finish(store, options, resources, token, (owned, revision), lease, alive)
}

/// The lock held: its state, once the validity left is checked.
fn finish(
    store: &Cluster,
    options: &LockOptions,
    resources: &Resources,
    token: Arc<str>,
    (owned, revision): (Vec<Owned>, i64),
    mut lease: Undo<'_>,
    alive: Alive,
) -> Result<(Held, Keys)> {
    let validity = store.lease(alive.since, alive.ttl);
    validity.left(options.min_validity)?;
    lease.armed = false;
    let acquired = Granted {
        resources: resources.clone(),
        token,
        // Revisions start at 1 and only grow.
        fence: Some(revision.unsigned_abs()),
        lease: validity,
        confirmed: 1,
    };
    Ok((Held::new(acquired, options), Keys::new(lease.lease, owned)))
}

/// Creates our key on every resource, in one transaction, if no key is
/// under any of their prefixes (nobody holds or waits); otherwise writes
/// nothing and says [`Error::Held`].
async fn take_if_free(
    store: &Cluster,
    client: &mut Client,
    names: Vec<String>,
    token: &str,
    lease: i64,
) -> Result<(Vec<Owned>, i64)> {
    let free: Vec<Compare> = names
        .iter()
        .map(|name| Compare::create_revision(store.resource_prefix(name), CompareOp::Equal, 0).with_prefix())
        .collect();
    let keys: Vec<String> = names.iter().map(|name| store.key(name, lease)).collect();
    let puts: Vec<TxnOp> = keys
        .iter()
        .map(|key| TxnOp::put(key.as_str(), token, Some(PutOptions::new().with_lease(lease))))
        .collect();
    let reply = store
        .call(client.txn(Txn::new().when(free).and_then(puts)))
        .await?;
    if !reply.succeeded() {
        return Err(cluster::held());
    }
    let created = revision(&reply);
    let owned = names
        .into_iter()
        .zip(keys)
        .map(|(resource, key)| Owned {
            resource,
            key,
            revision: created,
        })
        .collect();
    Ok((owned, created))
}

/// Revokes the lease of an attempt that did not succeed.
struct Undo<'a> {
    store: &'a Arc<Cluster>,
    lease: i64,
    /// The lease's ttl: a revoke is tried until it would have expired.
    ttl: Duration,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.armed {
            revoke_in_background(self.store, self.lease, self.ttl);
        }
    }
}

/// Since when, and for how long, the attempt's lease is known alive.
struct Alive {
    since: Instant,
    ttl: Duration,
    keeper: Option<Keeper>,
}

impl Alive {
    /// When the next keep-alive of a waiter is due.
    fn renew_at(&self) -> Instant {
        self.since + self.ttl / RENEW_DIVISOR
    }

    /// One keep-alive; `Ok(false)` when it failed (try again soon),
    /// [`Error::Lost`] when the lease is gone.
    async fn keep(&mut self, store: &Cluster, lease: i64) -> Result<bool> {
        let keeper = match self.keeper.as_mut() {
            Some(keeper) => keeper,
            None => self.keeper.insert(Keeper::open(store, lease).await?),
        };
        match keeper
            .renew(store, Instant::now() + store.state.request_timeout)
            .await
        {
            Ok(KeptAlive::Alive { sent, ttl }) => {
                (self.since, self.ttl) = (sent, ttl);
                Ok(true)
            }
            Ok(KeptAlive::Expired) => Err(store.state.lost()),
            Err(error) => {
                tracing::debug!(%error, "keep-alive of a waiting etcd lease failed");
                self.keeper = None;
                Ok(false)
            }
        }
    }

    /// A keep-alive that must succeed now.
    async fn confirm(&mut self, store: &Cluster, lease: i64) -> Result<()> {
        if self.keep(store, lease).await? {
            Ok(())
        } else {
            Err(store.unreachable(NodeErrorKind::Etcd(StoreFailure::new(
                "the keep-alive after the wait failed",
            ))))
        }
    }
}

/// Where a new key stands in its resource's line.
struct Place {
    /// The create revision of our key.
    created: i64,
    /// The revision at which the line was read.
    seen_at: i64,
    /// Our key is the oldest: the lock is ours.
    first: bool,
}

/// Creates our key unless it exists, and reads the oldest key of the line,
/// in one transaction.
async fn take_place(
    store: &Cluster,
    client: &mut Client,
    key: &str,
    token: &str,
    lease: i64,
    prefix: &str,
) -> Result<Place> {
    let put = TxnOp::put(key, token, Some(PutOptions::new().with_lease(lease)));
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([put, oldest(prefix)])
        .or_else([TxnOp::get(key, None), oldest(prefix)]);
    let reply = store.call(client.txn(txn)).await?;
    let seen_at = revision(&reply);
    let gets = gets(store, &reply)?;
    // Then: [put (no read), oldest]; else: [our key, oldest].
    let (created, oldest) = if reply.succeeded() {
        (Some(seen_at), first_created(&gets, 0))
    } else {
        (first_created(&gets, 0), first_created(&gets, 1))
    };
    let (Some(created), Some(oldest)) = (created, oldest) else {
        return Err(store.state.lost());
    };
    Ok(Place {
        created,
        seen_at,
        first: oldest == created,
    })
}

/// The oldest key under `prefix`.
fn oldest(prefix: &str) -> TxnOp {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    TxnOp::get(prefix, Some(options))
}

fn revision(reply: &TxnResponse) -> i64 {
    reply.header().map_or(0, |header| header.revision())
}

/// The range replies of a transaction, in order (a put's reply is skipped).
fn gets(store: &Cluster, reply: &TxnResponse) -> Result<Vec<Vec<i64>>> {
    let gets: Vec<Vec<i64>> = reply
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get.kvs().iter().map(|kv| kv.create_revision()).collect()),
            _ => None,
        })
        .collect();
    if gets.is_empty() {
        return Err(store.unreachable(NodeErrorKind::Etcd(StoreFailure::new(
            "a transaction answered without its reads",
        ))));
    }
    Ok(gets)
}

/// The create revision of the first key the `i`-th read found.
fn first_created(gets: &[Vec<i64>], i: usize) -> Option<i64> {
    gets.get(i)?.first().copied()
}

/// After a wait: every key of ours still exists with its revision and is
/// the oldest of its line. Returns the revision at which that was read.
async fn confirm_first(store: &Cluster, client: &mut Client, owned: &[Owned]) -> Result<i64> {
    let compares = all_present(owned);
    let reads: Vec<TxnOp> = owned
        .iter()
        .map(|o| oldest(&store.resource_prefix(&o.resource)))
        .collect();
    let reply = store
        .call(client.txn(Txn::new().when(compares).and_then(reads)))
        .await?;
    if !reply.succeeded() {
        return Err(store.state.lost());
    }
    let gets = gets(store, &reply)?;
    for (i, own) in owned.iter().enumerate() {
        if first_created(&gets, i) != Some(own.revision) {
            return Err(store.state.lost());
        }
    }
    Ok(revision(&reply))
}

/// A waiter's place in the line of one resource.
struct Line<'a> {
    store: &'a Cluster,
    prefix: &'a str,
    /// Our key's create revision.
    own: i64,
    deadline: Instant,
}

impl Line<'_> {
    /// Waits until every key created before ours is gone, watching only the
    /// newest of them each time (no herd), keeping our lease alive.
    async fn wait(&self, client: &mut Client, lease: i64, alive: &mut Alive) -> Result<()> {
        loop {
            let options = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_max_create_revision(self.own - 1)
                .with_limit(1);
            let before = self.store.call(client.get(self.prefix, Some(options))).await?;
            let Some(predecessor) = before.kvs().first() else {
                return Ok(());
            };
            let read_at = before.header().map_or(0, |header| header.revision());
            let key = predecessor.key().to_vec();
            self.wait_deleted(client, key, read_at + 1, lease, alive).await?;
        }
    }

    /// Waits for the deletion of `key` at a revision from `from` on.
    ///
    /// The watch may hang with the member it was opened on (a member paused
    /// or cut off keeps the connection open and says nothing), so each
    /// keep-alive of our lease also checks that the key is still there: a
    /// stuck watch costs at most a third of the ttl, not the whole wait.
    async fn wait_deleted(
        &self,
        client: &mut Client,
        key: Vec<u8>,
        from: i64,
        lease: i64,
        alive: &mut Alive,
    ) -> Result<()> {
        let store = self.store;
        let options = WatchOptions::new().with_start_revision(from);
        let mut watch = store.call(client.watch(key.clone(), Some(options))).await?;
        let mut renew_at = alive.renew_at();
        loop {
            tokio::select! {
                message = watch.message() => match message {
                    Ok(Some(reply)) if reply.canceled() => return Ok(()),
                    Ok(Some(reply)) => {
                        if reply.events().iter().any(|e| e.event_type() == EventType::Delete) {
                            return Ok(());
                        }
                    }
                    Ok(None) => return Err(store.unreachable(NodeErrorKind::Etcd(StoreFailure::new("the watch ended")))),
                    Err(e) => return Err(store.unreachable(NodeErrorKind::Etcd(StoreFailure::caused_by("watch", e)))),
                },
                () = tokio::time::sleep_until(renew_at) => {
                    if !alive.keep(store, lease).await? {
                        renew_at = Instant::now() + ETCD_RENEW_RETRY;
                        continue;
                    }
                    renew_at = alive.renew_at();
                    let exists = client.get(key.clone(), Some(GetOptions::new().with_count_only()));
                    if store.call(exists).await.is_ok_and(|reply| reply.count() == 0) {
                        return Ok(());
                    }
                }
                () = tokio::time::sleep_until(self.deadline) => return Err(cluster::held()),
                () = store.state.tasks.closing().cancelled() => return Err(Error::Closed),
            }
        }
    }
}
