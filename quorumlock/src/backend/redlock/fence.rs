//! Fencing tokens (opt-in, [`crate::LockOptions::fenced`]) and fenced writes.
//!
//! A lock can be lost while its holder still works (a long pause, a node
//! restarted without persistence, a clock jump). The protected resource then
//! needs a number that grows with each holder, so that it can refuse a stale
//! holder's writes. A single-node `INCR` is not that number under a quorum:
//! two holders of a violated lock can read it from different nodes. Here the
//! token is agreed by a majority (a majority max-register), and a node takes
//! a value only from the owner of the resources' keys on it:
//!
//! 1. The fenced acquire proposes a token `G` with its grant: the nodes'
//!    clocks as last seen, [`FENCE_LEAD`] ahead ([`Proposer`]). A node that
//!    grants takes `G` as the resources' fence if `G` is above its fence
//!    floor, `max(stored fence, node TIME in µs)`, and at most
//!    [`FENCE_AHEAD`](crate::config::FENCE_AHEAD) past its clock; every node
//!    replies its floor. `G` is the token when a majority of the grants
//!    counted took it: one round trip, as for a plain lock.
//! 2. Otherwise, after a majority granted, `T = max(floors) + 1` is proposed
//!    to every node; a node accepts only while it holds our keys and all its
//!    fences are below `T`, and raises them to `T`.
//! 3. `T` is the token once a majority accepted it within the lock's
//!    validity; a majority of rejections retries with `max(replies) + 1`, at
//!    most [`FENCE_ROUNDS`] times.
//!
//! Unique always: a node takes a value at most once (only above its
//! fence), so one value never wins two majorities. Strictly increasing
//! across holders: a node raises a fence only while the proposer's keys are
//! on it, and on one node the keys of successive holders follow each other
//! (`NX`): holder A's keys are gone from a node before holder B's are set
//! there, since B's are set in B's acquisition and A's leave only with A's
//! release or expiry, after A's hold. B's majority of takers shares a node
//! with A's, which had raised its fence to `T_A` before B's keys came, so it
//! took `T_B` only because `T_B > T_A`. A node restarted without
//! persistence forgets its fences; the time floor keeps new values above
//! old tokens (which are node times plus small increments, and never more
//! than [`FENCE_AHEAD`](crate::config::FENCE_AHEAD) ahead of the clock that
//! took them), as long as node clocks do not step backwards. The full
//! argument is in docs/how-it-works.md, "Fencing tokens"; the model in
//! `model/` checks it with every interleaving of small runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use redis::ToRedisArgs;
use redis::aio::ConnectionLike;
use tokio::time::Instant;

use crate::backend::redlock::quorum::{Quorum, Until};
use crate::backend::redlock::wire::fence::{self as wire_fence, FencedReply, Propose};
use crate::backend::redlock::wire::keys;
use crate::config::{FENCE_LEAD, FENCE_RETENTION, FENCE_ROUNDS};
use crate::error::{Error, NodeErrorKind, Result, Setting};

/// The token a client's fenced acquires propose with their grant (step 1
/// of the module docs): the nodes' clocks as its last fenced acquire saw
/// them, [`FENCE_LEAD`] ahead.
///
/// Kept as the difference between the fastest node clock and this
/// machine's, each node's reading taken against our clock at the send
/// (so the difference errs high, by up to the round trip): the proposal
/// follows the nodes' time even where ours is off. Before any reply (and
/// after a restart of the client) the difference is taken as zero; a
/// proposal the nodes refuse costs that acquisition the proposal phase,
/// and its replies correct the difference.
#[derive(Debug, Default)]
pub(crate) struct Proposer {
    /// Fastest node clock minus ours, µs, as of the last fenced acquire.
    offset_us: AtomicI64,
}

impl Proposer {
    /// The token to propose with an acquire sent at `sent_us` (our clock,
    /// unix µs).
    pub(crate) fn proposal(&self, sent_us: u64) -> u64 {
        let lead = i64::try_from(FENCE_LEAD.as_micros()).unwrap_or(i64::MAX);
        let at = i64::try_from(sent_us).unwrap_or(i64::MAX);
        u64::try_from(
            at.saturating_add(self.offset_us.load(Ordering::Relaxed))
                .saturating_add(lead),
        )
        .unwrap_or(0)
    }

    /// Takes the nodes' clocks (unix µs) that a fenced acquire sent at
    /// `sent_us` read.
    pub(crate) fn learn(&self, sent_us: u64, node_us: impl Iterator<Item = u64>) {
        let offset = node_us
            .map(|node| i64::try_from(node).unwrap_or(i64::MAX) - i64::try_from(sent_us).unwrap_or(0))
            .max();
        if let Some(offset) = offset {
            self.offset_us.store(offset, Ordering::Relaxed);
        }
    }
}

/// What phase 2 proposes for: the lock's keys, its token (the owner the
/// nodes check) and the resources' fence keys.
pub(crate) struct Owner<'a> {
    pub(crate) keys: &'a Arc<[String]>,
    pub(crate) token: &'a Arc<str>,
    pub(crate) fence_keys: &'a Arc<[String]>,
}

/// Phase 2: agrees on a token above `floor` for the fences of `owner`'s
/// resources on a majority, each round bounded by the per-node timeout and
/// by `valid_until`.
pub(crate) async fn propose(
    quorum: &Quorum,
    owner: Owner<'_>,
    floor: u64,
    valid_until: Instant,
) -> Result<u64> {
    let mut proposal = floor + 1;
    let mut rounds = 1;
    loop {
        let deadline = quorum.deadline().min(valid_until);
        let highest = Arc::new(AtomicU64::new(0));
        let request = Arc::new(Propose {
            keys: Arc::clone(owner.keys),
            owner: Arc::clone(owner.token),
            fence_keys: Arc::clone(owner.fence_keys),
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
            tracing::debug!(fence_keys = ?owner.fence_keys, rounds, ?round, "fence proposal failed");
            return Err(round.no_majority());
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
    /// lock is violated: each makes the keys its own everywhere, as owners
    /// that all believe they hold would, and the others' proposals then
    /// meet keys of another owner): however the rounds interleave, no two
    /// of them may come out with the same token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_proposals_never_yield_the_same_token() {
        let servers: Arc<[server::RedisServer]> = (0..5).map(|_| server::RedisServer::start()).collect();
        let redlock = Redlock::builder()
            .nodes(servers.iter().map(server::RedisServer::url))
            .node_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let keys: Arc<[String]> = Arc::from(["contended".to_owned()]);
        let fence_keys: Arc<[String]> = Arc::from([keys::fence("contended")]);
        let proposers = (0..16).map(|p| {
            let (redlock, servers) = (redlock.clone(), Arc::clone(&servers));
            let (keys, fence_keys) = (Arc::clone(&keys), Arc::clone(&fence_keys));
            tokio::spawn(async move {
                let token: Arc<str> = Arc::from(format!("owner-{p}"));
                let mut won = Vec::new();
                for _ in 0..25 {
                    let (servers, owner) = (Arc::clone(&servers), Arc::clone(&token));
                    tokio::task::spawn_blocking(move || {
                        for server in servers.iter() {
                            server.command(&["SET", "contended", &owner]).unwrap();
                        }
                    })
                    .await
                    .unwrap();
                    let valid_until = Instant::now() + Duration::from_secs(30);
                    let owner = Owner {
                        keys: &keys,
                        token: &token,
                        fence_keys: &fence_keys,
                    };
                    let quorum = &redlock.backend.redlock("fencing").unwrap().quorum;
                    if let Ok(token) = propose(quorum, owner, 0, valid_until).await {
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

    /// The proposal follows the fastest node clock seen, ahead by the lead,
    /// whatever our own clock says; before any reply it follows ours.
    #[test]
    fn proposals_follow_the_fastest_node_clock_seen() {
        let proposer = Proposer::default();
        let lead = u64::try_from(FENCE_LEAD.as_micros()).unwrap();
        assert_eq!(proposer.proposal(1_000_000), 1_000_000 + lead);
        proposer.learn(1_000_000, [1_000_300, 1_005_000, 999_000].into_iter());
        assert_eq!(proposer.proposal(2_000_000), 2_005_000 + lead);
        proposer.learn(3_000_000, [2_990_000].into_iter());
        assert_eq!(proposer.proposal(4_000_000), 3_990_000 + lead);
        proposer.learn(5_000_000, std::iter::empty());
        assert_eq!(proposer.proposal(6_000_000), 5_990_000 + lead, "no reply: kept");
    }
}
