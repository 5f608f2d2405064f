//! The rounds on the nodes behind [`Idempotency::run`](super::Idempotency::run):
//! claim the key, store the outcome, or take the marker back.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::Idempotency;
use crate::error::{Error, Result};
use crate::lock::release::release_all;
use crate::quorum::{self, Tally, Until};
use crate::random;
use crate::wire::idempotency::{self as wire_idempotency, Claim as ClaimRequest, Record, Store};
use crate::wire::lock::Release;
use crate::wire::millis;

impl Idempotency {
    /// Claims the key, polling while another caller holds it, until the
    /// wait runs out.
    pub(super) async fn claim_or_wait(
        &self,
        keys: &Arc<[String]>,
        ttl: Duration,
        drift: Duration,
    ) -> Result<Claim> {
        let deadline = quorum::deadline_after(self.wait);
        let cap = self.redlock.options.retry_delay.max(Duration::from_millis(1));
        let mut delay = cap / 8;
        loop {
            let error = match self.claim(keys, ttl, drift).await {
                Err(
                    e @ (Error::InProgress { .. } | Error::Unreachable { .. } | Error::ValidityUsedUp { .. }),
                ) => e,
                other => return other,
            };
            let pause = random::jitter(delay);
            if quorum::deadline_after(pause) > deadline {
                return Err(error);
            }
            tracing::debug!(key = keys[0], ?pause, %error, "idempotency key busy, polling");
            tokio::time::sleep(pause).await;
            delay = delay.saturating_mul(2).min(cap);
        }
    }

    /// One claim round on every node (see the module docs, step 1).
    async fn claim(&self, keys: &Arc<[String]>, ttl: Duration, drift: Duration) -> Result<Claim> {
        let quorum = &self.redlock.shared.quorum;
        let marker = wire_idempotency::marker(&random::token());
        let found: Arc<Mutex<Vec<Option<Vec<u8>>>>> = Arc::new(Mutex::new(vec![None; quorum.len()]));
        let request = Arc::new(ClaimRequest {
            key: Arc::clone(keys),
            marker: Arc::clone(&marker),
            ttl_ms: millis(ttl),
        });
        let start = Instant::now();
        let deadline = start + quorum.node_timeout;
        let tally = quorum
            .fan_out(deadline, deadline, Until::All, |i| {
                let (nodes, request, found) = (
                    Arc::clone(&quorum.nodes),
                    Arc::clone(&request),
                    Arc::clone(&found),
                );
                async move {
                    Ok(nodes[i].send(&*request).await?.map(|current| match current {
                        None => true,
                        Some(current) => {
                            found.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(current);
                            false
                        }
                    }))
                }
            })
            .await;
        let elapsed = start.elapsed();
        // Not ours after all? Then take back the markers we set. When every
        // node answered without setting one, there is nothing to take back.
        let set_any = tally.ok > 0 || !tally.errors.is_empty();
        let found = std::mem::take(&mut *found.lock().unwrap_or_else(PoisonError::into_inner));

        let (mut done, mut failed, mut foreign) = (None, None, false);
        for value in found.into_iter().flatten() {
            match Record::read(&value) {
                Record::Done(output) => {
                    done.get_or_insert_with(|| output.to_vec());
                }
                Record::Failed(message) => {
                    failed.get_or_insert_with(|| String::from_utf8_lossy(message).into_owned());
                }
                Record::Foreign => foreign = true,
                Record::Pending => {}
            }
        }
        let outcome = if let Some(output) = done {
            Ok(Claim::Done(output))
        } else if let Some(message) = failed {
            Ok(Claim::Failed(message))
        } else if foreign {
            Err(Error::Config(format!(
                "key {:?} holds a value that idempotency keys did not write (is it also a lock \
                 resource or other data? give idempotency keys their own prefix)",
                keys[0]
            )))
        } else if tally.reached() {
            match quorum::validity(ttl, elapsed, drift) {
                Some(left) if left >= self.redlock.options.min_validity => {
                    tracing::debug!(
                        key = keys[0],
                        claimed = tally.ok,
                        ?elapsed,
                        "idempotency key claimed"
                    );
                    return Ok(Claim::Owned(Owner {
                        keys: Arc::clone(keys),
                        marker,
                        ttl,
                        valid_until: start + ttl - drift,
                    }));
                }
                _ => Err(Error::ValidityUsedUp {
                    elapsed,
                    ttl,
                    min: self.redlock.options.min_validity,
                }),
            }
        } else if tally.refused_by_majority() {
            Err(Error::InProgress {
                pending: tally.refused,
                nodes: tally.nodes,
            })
        } else {
            Err(tally.unreachable())
        };
        if set_any {
            self.release(keys, &marker, ttl).await;
        }
        outcome
    }

    /// Stores a successful result (step 3) and reports how far it got.
    pub(super) async fn store_result(&self, owner: &Owner, output: Vec<u8>) -> Result<Vec<u8>> {
        let key = &owner.keys[0];
        if Instant::now() >= owner.valid_until {
            tracing::warn!(
                key,
                "the operation outlived its marker's validity: another caller may have run it"
            );
        }
        let tally = self.store(owner, wire_idempotency::done(&output)).await;
        if tally.reached() {
            tracing::debug!(key, stored = tally.ok, "idempotency result stored");
            return Ok(output);
        }
        tracing::warn!(key, ?tally, "idempotency result not stored on a majority");
        Err(Error::ResultNotStored {
            stored: tally.ok,
            refused: tally.refused,
            quorum: tally.quorum(),
            nodes: tally.nodes,
            errors: tally.errors,
            output: output.into(),
        })
    }

    /// Replaces our marker by `record` on every node that still holds it.
    ///
    /// Waits for every node up to the per-node timeout, like the claim: the
    /// count in [`Error::ResultNotStored`] is then exact, and the result is
    /// on every node that could take it before the caller moves on. Nodes
    /// that have not answered by then keep getting the record in the
    /// background for up to the marker's ttl (after which the owner check
    /// refuses it anyway).
    pub(super) async fn store(&self, owner: &Owner, record: Vec<u8>) -> Tally {
        let quorum = &self.redlock.shared.quorum;
        let store = Arc::new(Store {
            key: Arc::clone(&owner.keys),
            marker: Arc::clone(&owner.marker),
            record: record.into(),
            ttl_ms: millis(self.result_ttl),
        });
        let now = Instant::now();
        let (deadline, finish_by) = (
            now + quorum.node_timeout,
            now + owner.ttl.max(quorum.node_timeout),
        );
        quorum
            .ask(&store, deadline, finish_by, Until::All, |stored| *stored)
            .await
    }

    /// Deletes our marker on every node, owner-checked, waiting for answers
    /// up to the per-node timeout. Nodes that have not answered by then keep
    /// the delete going in the background for up to `ttl` (after which the
    /// marker has expired anyway), so it still runs behind a late claim.
    pub(super) async fn release(&self, keys: &Arc<[String]>, marker: &Arc<str>, ttl: Duration) -> Tally {
        let quorum = &self.redlock.shared.quorum;
        let now = Instant::now();
        let release = Release::new(Arc::clone(keys), Arc::clone(marker));
        release_all(
            quorum,
            release,
            now + quorum.node_timeout,
            now + ttl,
            Until::All,
            &[],
        )
        .await
    }
}

/// What a claim round found.
pub(super) enum Claim {
    /// Our marker is on a majority with validity left: run the operation.
    Owned(Owner),
    /// The operation already ran and succeeded: its result.
    Done(Vec<u8>),
    /// The operation already ran and failed, and the failure was cached.
    Failed(String),
}

/// The key while our marker holds it.
pub(super) struct Owner {
    /// The key, as the one-element list the node layer takes.
    pub(super) keys: Arc<[String]>,
    /// Our marker value, `pending:<token>`.
    pub(super) marker: Arc<str>,
    /// The marker's ttl.
    pub(super) ttl: Duration,
    /// Until when the marker is ours for sure (`start + ttl - drift`).
    pub(super) valid_until: Instant,
}
