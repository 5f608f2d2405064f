//! Fencing tokens (opt-in, [`crate::LockOptions::fenced`]) and fenced writes.
//!
//! A lock can be lost while its holder still works (a long pause, a node
//! restarted without persistence, a clock jump). The protected resource then
//! needs a number that grows with each holder, so that it can refuse a stale
//! holder's writes. A single-node `INCR` is not that number under a quorum:
//! two holders of a violated lock can read it from different nodes. Here the
//! token is agreed by a majority (a majority max-register):
//!
//! 1. The fenced acquire script also returns each granting node's fence for
//!    the resources: `max(stored fence, node TIME in µs)`.
//! 2. After a majority granted, `T = max(values) + 1` is proposed to every
//!    node; a node accepts only if all its fences are below `T`, and raises
//!    them to `T`.
//! 3. `T` is the token once a majority accepted it within the lock's
//!    validity; a majority of rejections retries with `max(replies) + 1`, at
//!    most [`FENCE_ROUNDS`] times.
//!
//! Unique always: a node accepts a value at most once, so two proposals of
//! one `T` cannot both win a majority. Strictly increasing across
//! non-overlapping holders: holder B wins the lock only after holder A's
//! keys are gone from a node of both quorums, which is after A's step 3, so
//! B's majority of acceptances shares a node with A's that holds `>= T_A`
//! and accepted `T_B` only because `T_B > T_A`. A node restarted without
//! persistence forgets its fences; the time floor of step 1 keeps new values
//! above old tokens (which are node times plus small increments), as long as
//! node clocks do not step backwards. The full argument is in
//! docs/how-it-works.md, "Fencing tokens".

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::ToRedisArgs;
use redis::aio::ConnectionLike;
use tokio::time::Instant;

use crate::backend::redlock::quorum::{Quorum, Until};
use crate::backend::redlock::wire::fence::{self as wire_fence, FencedReply, Propose};
use crate::backend::redlock::wire::keys;
use crate::config::{FENCE_RETENTION, FENCE_ROUNDS};
use crate::error::{Error, NodeErrorKind, Result, Setting};

/// Phase 2: agrees on a token above `floor` for the resources whose fence
/// keys are `fence_keys` on a majority, each round bounded by the per-node
/// timeout and by `valid_until`.
pub(crate) async fn propose(
    quorum: &Quorum,
    fence_keys: &Arc<[String]>,
    floor: u64,
    valid_until: Instant,
) -> Result<u64> {
    let mut proposal = floor + 1;
    let mut rounds = 1;
    loop {
        let deadline = quorum.deadline().min(valid_until);
        let highest = Arc::new(AtomicU64::new(0));
        let request = Arc::new(Propose {
            fence_keys: Arc::clone(fence_keys),
            token: proposal,
            retention: FENCE_RETENTION,
        });
        let round = quorum
            .fan_out(deadline, deadline, Until::Decided, |i| {
                let (nodes, request, highest) = (
                    Arc::clone(&quorum.nodes),
                    Arc::clone(&request),
                    Arc::clone(&highest),
                );
                async move {
                    let reply = nodes[i].send(&*request).await?;
                    Ok(reply.map(|proposed| {
                        highest.fetch_max(proposed.highest, Ordering::Relaxed);
                        proposed.accepted
                    }))
                }
            })
            .await;
        if round.reached() {
            return Ok(proposal);
        }
        if !round.refused_by_majority() || rounds == FENCE_ROUNDS || Instant::now() >= valid_until {
            tracing::debug!(?fence_keys, rounds, ?round, "fence proposal failed");
            return Err(round.unreachable());
        }
        rounds += 1;
        proposal = proposal.max(highest.load(Ordering::Relaxed)) + 1;
    }
}

/// The outcome of a [`FencedWrite`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fenced {
    /// The write was applied; for [`FencedWrite::incr_by`] the new value.
    Applied(Option<i64>),
    /// A holder with a newer token has written: this holder's lock was lost
    /// and the write was refused. Stop working.
    Stale {
        /// The highest token seen for the resource.
        seen: u64,
    },
    /// [`FencedWrite::incr_by`] would have gone below its minimum (e.g. out
    /// of stock); nothing was written.
    BelowMin {
        /// The current value.
        current: i64,
    },
}

/// Writes to data in Redis that apply only if the writer's fencing token is
/// at least the highest seen for the resource, atomically, without a lock.
///
/// The "highest token seen" lives next to the data, in key
/// `quorumlock:fence-seen:{<resource>}` on the connection you pass (the data store, which
/// need not be a lock node). A holder writes with its token; once a newer
/// holder has written, every write of an older token is refused with
/// [`Fenced::Stale`]. The same pattern in SQL:
/// `UPDATE stock SET qty = qty - 1, fence = $1 WHERE sku = $2 AND fence <= $1 AND qty >= 1`,
/// and zero rows updated means "stale or out of stock".
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::{Fenced, FencedWrite, Redlock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let fenced = redlock.with_options(redlock.options().fenced(true))?;
/// let guard = fenced.lock("sku:42", Duration::from_secs(10)).await?;
/// let token = guard.fence_token().expect("fenced lock");
/// let mut store = redis::Client::open("redis://127.0.0.1:6380")?
///     .get_multiplexed_async_connection()
///     .await?;
/// match FencedWrite::new("sku:42", token).incr_by(&mut store, "stock:42", -1, 0).await? {
///     Fenced::Applied(left) => println!("sold one, {left:?} left"),
///     Fenced::BelowMin { .. } => println!("out of stock"),
///     Fenced::Stale { .. } => println!("our lock was lost: a newer holder wrote"),
///     _ => {}
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedWrite {
    seen_key: String,
    token: u64,
}

impl FencedWrite {
    /// Writes for `resource` (the lock's resource name) with `token`.
    pub fn new(resource: &str, token: u64) -> Self {
        FencedWrite {
            seen_key: keys::fence_seen(resource),
            token,
        }
    }

    /// `SET key value`, fenced.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `key` holds a non-string value;
    /// [`Error::Unreachable`] when the store fails.
    pub async fn set<C, V>(&self, store: &mut C, key: &str, value: V) -> Result<Fenced>
    where
        C: ConnectionLike + Send,
        V: ToRedisArgs + Send + Sync,
    {
        let cmd = wire_fence::fenced_set(&self.seen_key, key, self.token, value);
        Ok(match self.run(store, cmd).await? {
            Fenced::Applied(_) => Fenced::Applied(None),
            other => other,
        })
    }

    /// `INCRBY key delta`, fenced, and only if the result stays at or above
    /// `min` (use a negative `delta` with `min = 0` to take stock).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `key` holds a non-integer value;
    /// [`Error::Unreachable`] when the store fails.
    pub async fn incr_by<C>(&self, store: &mut C, key: &str, delta: i64, min: i64) -> Result<Fenced>
    where
        C: ConnectionLike + Send,
    {
        let cmd = wire_fence::fenced_incr_by(&self.seen_key, key, self.token, delta, min);
        self.run(store, cmd).await
    }

    async fn run<C: ConnectionLike + Send>(&self, store: &mut C, cmd: redis::Cmd) -> Result<Fenced> {
        let reply = wire_fence::fenced_reply(store.req_packed_command(&cmd).await)
            .map_err(|e| Error::unreachable_store("fenced-write store".into(), NodeErrorKind::Redis(e)))?;
        let number = |what: &str, text: &str| -> Result<i64> {
            text.parse().map_err(|_| {
                Error::config(
                    Setting::FencedWrite,
                    format!("fenced write: unexpected {what} {text:?}"),
                )
            })
        };
        Ok(match reply {
            FencedReply::Applied(value) => Fenced::Applied(value.parse().ok()),
            FencedReply::Stale(seen) => Fenced::Stale {
                seen: number("seen token", &seen)?.try_into().unwrap_or(0),
            },
            FencedReply::BelowMin(current) => Fenced::BelowMin {
                current: number("value", &current)?,
            },
            FencedReply::BadKey(detail) => {
                return Err(Error::config(
                    Setting::FencedWrite,
                    format!("fenced write: {detail}"),
                ));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;
    use crate::Redlock;
    use quorumlock_testkit::server;

    /// Many proposers racing on one resource's fences (what happens when a
    /// lock is violated): however the rounds interleave, no two of them may
    /// come out with the same token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_proposals_never_yield_the_same_token() {
        let servers: Vec<server::RedisServer> = (0..5).map(|_| server::RedisServer::start()).collect();
        let redlock = Redlock::builder()
            .nodes(servers.iter().map(server::RedisServer::url))
            .node_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let fence_keys: Arc<[String]> = Arc::from([keys::fence("contended")]);
        let proposers = (0..16).map(|_| {
            let (redlock, fence_keys) = (redlock.clone(), Arc::clone(&fence_keys));
            tokio::spawn(async move {
                let mut won = Vec::new();
                for _ in 0..25 {
                    let valid_until = Instant::now() + Duration::from_secs(30);
                    if let Ok(token) = propose(
                        &redlock.backend.redlock("fencing").unwrap().quorum,
                        &fence_keys,
                        0,
                        valid_until,
                    )
                    .await
                    {
                        won.push(token);
                    }
                }
                won
            })
        });
        let mut tokens = Vec::new();
        for proposer in proposers {
            tokens.extend(proposer.await.unwrap());
        }
        let unique: HashSet<u64> = tokens.iter().copied().collect();
        assert!(!tokens.is_empty(), "some proposals won");
        assert_eq!(
            unique.len(),
            tokens.len(),
            "duplicate tokens among {} wins",
            tokens.len()
        );
    }
}
