//! A held etcd lock's keys and the lease they are on: moving them to a new
//! lease (extend, minimum hold), revoking it (release), in the foreground
//! or in the background.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::Cluster;
use crate::config::etcd::ETCD_RENEW_RETRY;
use crate::error::{Error, Result};
use crate::lock::state::Held;

/// Our key on one resource.
#[derive(Clone, Debug)]
pub(crate) struct Owned {
    pub(crate) resource: String,
    pub(crate) key: String,
    /// Its create revision: its place in the resource's line, and the proof
    /// that the key is still the one we created.
    pub(crate) revision: i64,
}

/// The compares that hold while every key of `owned` exists as created.
pub(crate) fn all_present(owned: &[Owned]) -> Vec<Compare> {
    owned
        .iter()
        .map(|o| Compare::create_revision(o.key.as_str(), CompareOp::Equal, o.revision))
        .collect()
}

/// The keys of one lock and the lease they are attached to (a new one
/// after an extend or a keep until the minimum hold).
#[derive(Debug)]
pub(crate) struct Keys {
    lease: AtomicI64,
    pub(crate) owned: Vec<Owned>,
}

impl Keys {
    pub(crate) fn new(lease: i64, owned: Vec<Owned>) -> Keys {
        Keys {
            lease: AtomicI64::new(lease),
            owned,
        }
    }

    pub(crate) fn lease(&self) -> i64 {
        self.lease.load(Ordering::Acquire)
    }

    /// Every key still exists as we created it.
    pub(crate) fn all_present(&self) -> Vec<Compare> {
        all_present(&self.owned)
    }
}

/// Gives the lock back: revokes its lease (which deletes every key of it in
/// one step), or, while its minimum hold has not passed, moves the keys to
/// a lease that lasts until then. `Ok(Some(until))` when kept.
///
/// A revoke that fails (a leader election outlasting the request timeout)
/// is the caller's error, and is tried again in the background until the
/// lease would have expired anyway: the lock is free as soon as the
/// cluster serves again, not a ttl later.
pub(crate) async fn give_back(store: &Arc<Cluster>, held: &Held, keys: &Keys) -> Result<Option<Instant>> {
    // A keep-alive after this changes nothing (a revoked lease stays
    // revoked), but one racing a relocation must not see the old lease.
    held.mark_released();
    let now = Instant::now();
    if let Some(until) = held.keep_until(now) {
        let left = until - now;
        let seconds = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        let (sent, granted) = relocate(
            store,
            keys,
            i64::try_from(seconds).unwrap_or(i64::MAX),
            held.ttl(),
        )
        .await?;
        return Ok(Some((sent + granted).max(until)));
    }
    let lease = keys.lease();
    if let Err(error) = revoke(store, lease).await {
        revoke_in_background(store, lease, held.ttl());
        return Err(error);
    }
    Ok(None)
}

/// Revokes `lease`; one already gone (expired, revoked) counts as revoked.
pub(crate) async fn revoke(store: &Cluster, lease: i64) -> Result<()> {
    let mut client = store.client().await?;
    match store.call(client.lease_revoke(lease)).await {
        Ok(_) => Ok(()),
        Err(Error::Unreachable { errors, .. })
            if errors.iter().any(|e| e.to_string().contains("lease not found")) =>
        {
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// Revokes `lease` in the background, as tracked work, trying again every
/// [`ETCD_RENEW_RETRY`] for up to `ttl` (after which the lease has expired
/// by itself); never blocks. Without a runtime the lease expires with its
/// ttl.
pub(crate) fn revoke_in_background(store: &Arc<Cluster>, lease: i64, ttl: Duration) {
    let task_store = Arc::clone(store);
    store.state.retry_in_background(
        ETCD_RENEW_RETRY,
        ttl,
        format!("etcd lease {lease:x} revoke failed; it expires with its ttl"),
        move || {
            let store = Arc::clone(&task_store);
            async move { revoke(&store, lease).await }
        },
    );
}

/// Attaches every key of the lock to a new lease of `seconds`, if every key
/// is still ours, and revokes the old lease. Returns when the new lease's
/// grant was sent and its ttl. The keys keep their create revisions, so
/// their place in line, and their names.
pub(crate) async fn relocate(
    store: &Arc<Cluster>,
    keys: &Keys,
    seconds: i64,
    old_ttl: Duration,
) -> Result<(Instant, Duration)> {
    let mut client = store.client().await?;
    let sent = Instant::now();
    let grant = store.call(client.lease_grant(seconds, None)).await?;
    let new = grant.id();
    let granted = Duration::from_secs(grant.ttl().unsigned_abs());
    let puts: Vec<TxnOp> = keys
        .owned
        .iter()
        .map(|o| {
            TxnOp::put(
                o.key.as_str(),
                "",
                Some(PutOptions::new().with_lease(new).with_ignore_value()),
            )
        })
        .collect();
    let moved = store
        .call(client.txn(Txn::new().when(keys.all_present()).and_then(puts)))
        .await;
    let moved = match moved {
        Ok(reply) => Ok(reply.succeeded()),
        // The transaction may have been applied: ask the keys which lease
        // they are on before revoking either.
        Err(error) => on_lease(store, &mut client, keys, new).await.ok_or(error),
    };
    match moved {
        Ok(true) => {
            let old = keys.lease.swap(new, Ordering::AcqRel);
            revoke_in_background(store, old, old_ttl);
            Ok((sent, granted))
        }
        Ok(false) => {
            revoke_in_background(store, new, granted);
            Err(store.state.lost())
        }
        // Unknown: the keys may live only as long as the new lease, which
        // may end before the old validity. The lock can no longer be
        // trusted; the new lease expires by itself.
        Err(error) => {
            tracing::warn!(%error, "etcd lease change with an unknown outcome: the lock counts as lost");
            Err(store.state.lost())
        }
    }
}

/// Whether every key of the lock is on lease `lease` (`None` when that
/// could not be read).
async fn on_lease(
    store: &Cluster,
    client: &mut etcd_client::Client,
    keys: &Keys,
    lease: i64,
) -> Option<bool> {
    let compares: Vec<Compare> = keys
        .owned
        .iter()
        .map(|o| Compare::lease(o.key.as_str(), CompareOp::Equal, lease))
        .chain(keys.all_present())
        .collect();
    let reply = store.call(client.txn(Txn::new().when(compares))).await.ok()?;
    Some(reply.succeeded())
}
