//! The rounds on the nodes behind [`Idempotency::run`](super::Idempotency::run):
//! claim the key, store the outcome, or take the marker back.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::Idempotency;
use super::IdempotencyError;
use crate::backend::redlock::quorum::{Quorum, Tally, Until};
use crate::backend::redlock::release::{Deadlines, release_all};
use crate::backend::redlock::wire::idempotency::{
    self as wire_idempotency, Claim as ClaimRequest, Record, StoreRecord,
};
use crate::backend::redlock::wire::lock::Release;
use crate::backend::redlock::wire::millis;
use crate::duration::deadline_after;
use crate::error::{Error, Result, Setting};
use crate::random;

impl Idempotency {
    /// Claims the key, polling while another caller holds it, until the
    /// wait runs out.
    pub(super) async fn claim_or_wait(
        &self,
        quorum: &Quorum,
        keys: &Arc<[String]>,
        ttl: Duration,
    ) -> Result<Claim, IdempotencyError> {
        let deadline = deadline_after(self.wait);
        let cap = self.redlock.options.retry_delay.max(Duration::from_millis(1));
        let mut delay = cap / 8;
        loop {
            let error = match self.claim(quorum, keys, ttl).await {
                Err(
                    e @ (IdempotencyError::InProgress { .. }
                    | IdempotencyError::Lock(Error::Unreachable { .. } | Error::ValidityUsedUp { .. })),
                ) => e,
                other => return other,
            };
            let pause = random::jitter(delay);
            if deadline_after(pause) > deadline {
                return Err(error);
            }
            tracing::debug!(key = keys[0], ?pause, %error, "idempotency key busy, polling");
            tokio::time::sleep(pause).await;
            delay = delay.saturating_mul(2).min(cap);
        }
    }

    /// One claim round on every node (see the module docs, step 1).
    async fn claim(
        &self,
        quorum: &Quorum,
        keys: &Arc<[String]>,
        ttl: Duration,
    ) -> Result<Claim, IdempotencyError> {
        let marker = wire_idempotency::marker(&random::token());
        let start = Instant::now();
        let (tally, found) = self.claim_everywhere(quorum, keys, &marker, ttl).await;
        // Not ours after all? Then take back the markers we set. When every
        // node answered without setting one, there is nothing to take back.
        let set_any = tally.ok > 0 || !tally.errors.is_empty();
        let outcome: Result<Claim, IdempotencyError> = match Found::read(found) {
            Found {
                done: Some(output), ..
            } => Ok(Claim::Done(output)),
            Found {
                failed: Some(message),
                ..
            } => Ok(Claim::Failed(message)),
            Found { foreign: true, .. } => Err(IdempotencyError::Lock(Error::config(
                Setting::IdempotencyKey,
                format!(
                    "key {:?} holds a value that idempotency keys did not write (is it also a lock \
                 resource or other data? give idempotency keys their own prefix)",
                    keys[0]
                ),
            ))),
            _ if tally.reached() => {
                let lease = quorum.lease(start, ttl, &tally);
                match lease.left(self.redlock.options.min_validity) {
                    Ok(left) => {
                        tracing::debug!(
                            key = keys[0],
                            claimed = tally.ok,
                            ?left,
                            "idempotency key claimed"
                        );
                        return Ok(Claim::Owned(Owner {
                            keys: Arc::clone(keys),
                            marker,
                            ttl,
                            valid_until: lease.valid_until(),
                        }));
                    }
                    Err(error) => Err(error.into()),
                }
            }
            _ if tally.refused_by_majority() => Err(IdempotencyError::InProgress {
                pending: tally.refused,
                nodes: tally.nodes,
            }),
            _ => Err(tally.unreachable().into()),
        };
        if set_any {
            self.release(quorum, keys, &marker, ttl).await;
        }
        outcome
    }

    /// Sends the claim of `marker` to every node and waits for every answer
    /// up to the node timeout; returns the count and, per node, the value it
    /// found in place of setting ours.
    async fn claim_everywhere(
        &self,
        quorum: &Quorum,
        keys: &Arc<[String]>,
        marker: &Arc<str>,
        ttl: Duration,
    ) -> (Tally, Vec<Option<Vec<u8>>>) {
        let found: Arc<Mutex<Vec<Option<Vec<u8>>>>> = Arc::new(Mutex::new(vec![None; quorum.len()]));
        let request = Arc::new(ClaimRequest {
            key: Arc::clone(keys),
            marker: Arc::clone(marker),
            ttl_ms: millis(ttl),
        });
        let deadline = quorum.deadline();
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
        let found = std::mem::take(&mut *found.lock().unwrap_or_else(PoisonError::into_inner));
        (tally, found)
    }

    /// Stores a successful result (step 3) and reports how far it got.
    pub(super) async fn store_result(
        &self,
        quorum: &Quorum,
        owner: &Owner,
        output: Vec<u8>,
    ) -> Result<Vec<u8>, IdempotencyError> {
        let key = &owner.keys[0];
        if Instant::now() >= owner.valid_until {
            tracing::warn!(
                key,
                "the operation outlived its marker's validity: another caller may have run it"
            );
        }
        let tally = self.store(quorum, owner, wire_idempotency::done(&output)).await;
        if tally.reached() {
            tracing::debug!(key, stored = tally.ok, "idempotency result stored");
            return Ok(output);
        }
        tracing::warn!(key, ?tally, "idempotency result not stored on a majority");
        Err(IdempotencyError::ResultNotStored {
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
    /// count in [`IdempotencyError::ResultNotStored`] is then exact, and the result is
    /// on every node that could take it before the caller moves on. Nodes
    /// that have not answered by then keep getting the record in the
    /// background for up to the marker's ttl (after which the owner check
    /// refuses it anyway).
    pub(super) async fn store(&self, quorum: &Quorum, owner: &Owner, record: Vec<u8>) -> Tally {
        let store = Arc::new(StoreRecord {
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
    pub(super) async fn release(
        &self,
        quorum: &Quorum,
        keys: &Arc<[String]>,
        marker: &Arc<str>,
        ttl: Duration,
    ) -> Tally {
        let now = Instant::now();
        let release = Release::new(Arc::clone(keys), Arc::clone(marker));
        let deadlines = Deadlines {
            answer_by: now + quorum.node_timeout,
            finish_by: now + ttl,
        };
        release_all(quorum, release, deadlines, Until::All, &[]).await
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

/// What the nodes that did not take our marker held instead: the first
/// result of each kind.
#[derive(Default)]
struct Found {
    done: Option<Vec<u8>>,
    failed: Option<String>,
    /// A value that idempotency keys did not write.
    foreign: bool,
}

impl Found {
    fn read(values: Vec<Option<Vec<u8>>>) -> Found {
        let mut found = Found::default();
        for value in values.into_iter().flatten() {
            match Record::read(&value) {
                Record::Done(output) => {
                    found.done.get_or_insert_with(|| output.to_vec());
                }
                Record::Failed(message) => {
                    found
                        .failed
                        .get_or_insert_with(|| String::from_utf8_lossy(message).into_owned());
                }
                Record::Foreign => found.foreign = true,
                Record::Pending => {}
            }
        }
        found
    }
}

/// The key while our marker holds it.
pub(super) struct Owner {
    /// The key, as the one-element list the node layer takes.
    pub(super) keys: Arc<[String]>,
    /// Our marker value, `pending:<token>`.
    pub(super) marker: Arc<str>,
    /// The marker's ttl.
    pub(super) ttl: Duration,
    /// Until when the marker is ours for sure (the claim's lease).
    pub(super) valid_until: Instant,
}
