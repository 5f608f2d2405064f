//! Operator tools: what each node holds for a lock ([`Redlock::inspect`]),
//! and clearing it ([`Redlock::unlock`], [`Redlock::force_unlock`]).
//!
//! None of this is for taking or keeping a lock: an inspection is a
//! snapshot that may be out of date when it returns, and the unlocks act on
//! a lock that someone else holds. They are for the person on call who
//! asks "is it locked, by whom, for how long?", and for clearing a lock
//! whose holder is known to be gone.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use crate::backend::Backend;
use crate::backend::redlock::node::Acked;
use crate::backend::redlock::quorum::Quorum;
use crate::backend::redlock::wire::inspect::{Content, Facts, ForceDelete, Inspect};
use crate::backend::redlock::wire::keys;
use crate::backend::redlock::wire::lock::Release;
use crate::client::Redlock;
use crate::error::{Error, NodeErrorKind, Result, Setting};
use crate::lock::resources::Resources;

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod cluster;
#[cfg(feature = "etcd")]
mod etcd;
mod unlock;
#[cfg(feature = "zookeeper")]
mod zookeeper;

pub use self::unlock::{DeletedValue, NodeUnlock, UnlockOutcome, UnlockReport};

/// What each node holds for one lock key, and what a majority of them says.
///
/// A snapshot: the lock may change hands the moment after it was taken.
/// Made by [`Redlock::inspect`].
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{Redlock, Verdict};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let inspection = redlock.inspect("archive:nightly").await?;
/// for node in &inspection.nodes {
///     println!("{}: {:?}, {:?} waiting", node.node, node.state, node.waiters);
/// }
/// if let Verdict::Held { token, valid_for, .. } = &inspection.verdict {
///     println!("held by {token} for at least {valid_for:?}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The resource inspected.
    pub resource: String,
    /// One entry per configured node, in the order they were configured.
    pub nodes: Vec<NodeInspection>,
    /// Nodes that make a majority: `nodes / 2 + 1`.
    pub quorum: usize,
    /// How long the inspection took, from the first request sent to the
    /// last answer (or the node timeout).
    pub elapsed: Duration,
    /// What a majority of all nodes says.
    pub verdict: Verdict,
}

/// One node's part of an [`Inspection`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = quorumlock::Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let inspection = redlock.inspect("archive:nightly").await?;
/// let queued: u64 = inspection.nodes.iter().filter_map(|n| n.waiters).max().unwrap_or(0);
/// println!("{queued} waiters queued");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeInspection {
    /// The node's address (`host:port/db`, never the password).
    pub node: String,
    /// What the lock key holds there.
    pub state: KeyState,
    /// Entries in the resource's hand-off queue there (`None` when the node
    /// failed). An entry of a waiter that died stays until the queue expires
    /// or a release skips it, so this is an upper bound on the live waiters.
    pub waiters: Option<u64>,
}

/// What a lock key holds on one node.
///
/// # Examples
///
/// ```
/// use quorumlock::KeyState;
///
/// fn describe(state: &KeyState) -> String {
///     match state {
///         KeyState::Free => "free".into(),
///         KeyState::Held { token, ttl } => format!("held by {token} for {ttl:?}"),
///         KeyState::WithoutTtl { value } => format!("{value} without a ttl: not a lock"),
///         KeyState::WrongType { kind, .. } => format!("a {kind}: other data"),
///         KeyState::Failed(error) => format!("no answer: {error:?}"),
///         _ => "unknown".into(),
///     }
/// }
/// assert_eq!(describe(&KeyState::Free), "free");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum KeyState {
    /// No key: nobody holds the lock on this node.
    Free,
    /// A string with a ttl: a lock, held by the owner of this token.
    /// quorumlock's tokens are 32 hex digits; any other string is the token
    /// of another Redlock library sharing the name. Shown lossily when not
    /// UTF-8.
    Held {
        /// The holder's token.
        token: String,
        /// The key's remaining ttl, by the node's clock.
        ttl: Duration,
    },
    /// A string without a ttl: not a lock (no lock sets one), and it blocks
    /// every lock on this name on this node until someone deletes it.
    WithoutTtl {
        /// The value.
        value: String,
    },
    /// Another type than a string: other data uses the lock's name.
    WrongType {
        /// The Redis type (`hash`, `list`, `zset`, ...).
        kind: String,
        /// Its remaining ttl, if it has one.
        ttl: Option<Duration>,
    },
    /// The node failed or did not answer within the node timeout.
    Failed(NodeErrorKind),
}

/// What a majority of all nodes says about a lock.
///
/// # Examples
///
/// ```
/// use quorumlock::Verdict;
///
/// fn exit_status(verdict: &Verdict) -> i32 {
///     match verdict {
///         Verdict::Free => 0,
///         Verdict::Held { .. } => 1,
///         _ => 3,
///     }
/// }
/// assert_eq!(exit_status(&Verdict::Indeterminate), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// A majority of all nodes hold this token with a ttl.
    #[non_exhaustive]
    Held {
        /// The holder's token.
        token: String,
        /// How long the lock is certain to stay held (unless released):
        /// the remaining ttl at which fewer than a majority would still
        /// hold it, minus the inspection's duration and the client's drift
        /// allowance for that ttl; zero when nothing is certain.
        valid_for: Duration,
    },
    /// A majority of all nodes have no key: anyone may take the lock.
    Free,
    /// Neither: nodes failed, disagree, or hold keys that are not locks.
    Indeterminate,
}

impl Redlock {
    /// What every node holds for `resource`: its value (the holder's token),
    /// remaining ttl and queued waiters, or the node's error, each node's
    /// facts read in one atomic step; and what a majority of all nodes says
    /// ([`Verdict`]).
    ///
    /// Waits for every node, up to the node timeout. Changes nothing. An
    /// operator tool: decide nothing about taking a lock on it, since the
    /// lock may change hands as soon as this returns.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a resource name that no lock may have (empty,
    /// or in the reserved namespace), [`Error::Closed`] after
    /// [`Redlock::shutdown`]. A failing node is not an error: it is
    /// reported as [`KeyState::Failed`].
    pub async fn inspect(&self, resource: &str) -> Result<Inspection> {
        let resource = self.operable(resource)?;
        #[cfg(feature = "etcd")]
        if let Backend::Etcd(store) = &self.backend {
            return Ok(etcd::inspect(store, resource).await);
        }
        #[cfg(feature = "zookeeper")]
        if let Backend::ZooKeeper(store) = &self.backend {
            return Ok(zookeeper::inspect(store, resource).await);
        }
        let quorum = &self.backend.redis("inspect")?.quorum;
        let request = Arc::new(Inspect {
            key: resource.clone(),
            queue: keys::queue(&resource),
        });
        let started = Instant::now();
        let replies = each_node(quorum, |i| {
            let (nodes, request) = (Arc::clone(&quorum.nodes), Arc::clone(&request));
            async move { nodes[i].send(&*request).await }
        })
        .await;
        let elapsed = started.elapsed();
        let nodes: Vec<NodeInspection> = replies
            .into_iter()
            .zip(quorum.nodes.iter())
            .map(|(reply, node)| {
                let (state, waiters) = match reply {
                    Ok(facts) => (key_state(&facts), Some(facts.waiters)),
                    Err(kind) => (KeyState::Failed(kind), None),
                };
                NodeInspection {
                    node: node.name().to_owned(),
                    state,
                    waiters,
                }
            })
            .collect();
        let verdict = verdict(quorum, &nodes, elapsed);
        Ok(Inspection {
            resource,
            nodes,
            quorum: quorum.majority(),
            elapsed,
            verdict,
        })
    }

    /// Operator tool: releases `resource` where it holds `token` (the
    /// holder's token, as [`Redlock::inspect`] shows it), on every node,
    /// owner-checked as a guard's release is: a node where the lock has
    /// meanwhile passed to another token keeps it.
    ///
    /// For a holder known to be gone whose lock should not wait out its
    /// ttl. A holder that is still running is not told: it goes on as if it
    /// held the lock, and its next renewal either re-creates the keys
    /// (healing, [`RedlockBuilder::heal`](crate::RedlockBuilder::heal)) or,
    /// where another process took the lock meanwhile, finds it lost; until
    /// then both run. Waits for every node, up to the node timeout.
    ///
    /// # Errors
    ///
    /// As [`Redlock::inspect`], and [`Error::Config`] for an empty token.
    /// Failing nodes are reported in the [`UnlockReport`].
    pub async fn unlock(&self, resource: &str, token: &str) -> Result<UnlockReport> {
        let resource = self.operable(resource)?;
        if token.is_empty() {
            return Err(Error::config(Setting::Token, "empty token"));
        }
        #[cfg(feature = "etcd")]
        if let Backend::Etcd(store) = &self.backend {
            return Ok(etcd::unlock(store, resource, Some(token)).await);
        }
        #[cfg(feature = "zookeeper")]
        if let Backend::ZooKeeper(store) = &self.backend {
            return Ok(zookeeper::unlock(store, resource, Some(token)).await);
        }
        let quorum = &self.backend.redis("unlock")?.quorum;
        let release = Arc::new(Release::new(Arc::new([resource.clone()]), Arc::from(token)));
        let replies = each_node(quorum, |i| {
            let (nodes, release) = (Arc::clone(&quorum.nodes), Arc::clone(&release));
            async move { Ok(Ok(nodes[i].release(&release).await?)) }
        })
        .await;
        Ok(report(quorum, resource, replies, |deleted| {
            (deleted > 0).then(|| DeletedValue::String(token.to_owned()))
        }))
    }

    /// Operator tool: deletes whatever the lock key of `resource` holds, on
    /// every node, and reports per node what it deleted. Each node reads and
    /// deletes in one atomic step, so the value reported is the one deleted.
    ///
    /// Not owner-checked: it frees the lock whoever holds it, and a holder
    /// that is still running is not told (see [`Redlock::unlock`]), while
    /// someone else may take the lock at once. Use it for a
    /// lock whose holder is gone, or for a key that is not a lock at all
    /// (no ttl, another type: see [`KeyState`]). The next queued waiter is
    /// woken as after a release. Waits for every node, up to the node
    /// timeout.
    ///
    /// # Errors
    ///
    /// As [`Redlock::inspect`]. Failing nodes are reported in the
    /// [`UnlockReport`].
    pub async fn force_unlock(&self, resource: &str) -> Result<UnlockReport> {
        let resource = self.operable(resource)?;
        #[cfg(feature = "etcd")]
        if let Backend::Etcd(store) = &self.backend {
            return Ok(etcd::unlock(store, resource, None).await);
        }
        #[cfg(feature = "zookeeper")]
        if let Backend::ZooKeeper(store) = &self.backend {
            return Ok(zookeeper::unlock(store, resource, None).await);
        }
        let quorum = &self.backend.redis("force_unlock")?.quorum;
        let request = Arc::new(ForceDelete {
            key: resource.clone(),
            queue: keys::queue(&resource),
        });
        let replies = each_node(quorum, |i| {
            let (nodes, request) = (Arc::clone(&quorum.nodes), Arc::clone(&request));
            async move { nodes[i].send(&*request).await }
        })
        .await;
        Ok(report(quorum, resource, replies, |content| match content {
            Content::Nothing => None,
            Content::String(value) => Some(DeletedValue::String(lossy(value))),
            Content::Other(kind) => Some(DeletedValue::Other { kind }),
        }))
    }

    /// `resource` checked as a lock's name is, for a client still open.
    fn operable(&self, resource: &str) -> Result<String> {
        let resources = Resources::from(resource).validated()?;
        if self.backend.is_closed() {
            return Err(Error::Closed);
        }
        Ok(resources.names()[0].clone())
    }
}

/// The report of an unlock from each node's reply, `deleted` saying
/// what a reply deleted.
fn report<T>(
    quorum: &Quorum,
    resource: String,
    replies: Vec<Result<T, NodeErrorKind>>,
    deleted: impl Fn(T) -> Option<DeletedValue>,
) -> UnlockReport {
    let nodes = replies
        .into_iter()
        .zip(quorum.nodes.iter())
        .map(|(reply, node)| NodeUnlock {
            node: node.name().to_owned(),
            outcome: match reply.map(&deleted) {
                Ok(Some(value)) => UnlockOutcome::Deleted(value),
                Ok(None) => UnlockOutcome::NotHeld,
                Err(kind) => UnlockOutcome::Failed(kind),
            },
        })
        .collect();
    UnlockReport {
        resource,
        nodes,
        quorum: quorum.majority(),
    }
}

/// Sends `op(i)` to every node `i` at once and waits for every answer, up
/// to the node timeout: an operator wants every node's word, not the first
/// majority's. Requests still pending at the deadline run on in the
/// background for up to one more node timeout, then are dropped.
async fn each_node<T, F, Fut>(quorum: &Quorum, op: F) -> Vec<Result<T, NodeErrorKind>>
where
    T: Send + 'static,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = RedisResult<Acked<T>>> + Send + 'static,
{
    let mut replies: Vec<Option<Result<T, NodeErrorKind>>> = (0..quorum.len()).map(|_| None).collect();
    let deadline = quorum.deadline();
    let finish_by = deadline + quorum.node_timeout;
    quorum
        .gather(deadline, finish_by, op, |i, reply| {
            replies[i] = Some(reply.and_then(|acked| acked));
            ControlFlow::Continue(())
        })
        .await;
    let budget = quorum.node_timeout;
    replies
        .into_iter()
        .map(|reply| reply.unwrap_or(Err(NodeErrorKind::Timeout(budget))))
        .collect()
}

/// A node's facts as the state of its key.
fn key_state(facts: &Facts) -> KeyState {
    let ttl = u64::try_from(facts.pttl).ok().map(Duration::from_millis);
    match (&facts.content, ttl) {
        (Content::Nothing, _) => KeyState::Free,
        (Content::String(value), Some(ttl)) => KeyState::Held {
            token: lossy(value.clone()),
            ttl,
        },
        (Content::String(value), None) => KeyState::WithoutTtl {
            value: lossy(value.clone()),
        },
        (Content::Other(kind), ttl) => KeyState::WrongType {
            kind: kind.clone(),
            ttl,
        },
    }
}

/// What a majority of all nodes says, from the nodes' states.
///
/// A token is held as long as a majority still holds it: with the ttls of
/// its holders in descending order, until the `quorum`-th of them runs out.
/// That ttl, less the inspection's duration (the ttls were read at some
/// moment within it) and the drift allowance for it, is the validity that
/// is certain.
fn verdict(quorum: &Quorum, nodes: &[NodeInspection], elapsed: Duration) -> Verdict {
    let majority = quorum.majority();
    if nodes.iter().filter(|n| matches!(n.state, KeyState::Free)).count() >= majority {
        return Verdict::Free;
    }
    for candidate in nodes {
        let KeyState::Held { token, .. } = &candidate.state else {
            continue;
        };
        let mut ttls: Vec<Duration> = nodes
            .iter()
            .filter_map(|n| match &n.state {
                KeyState::Held { token: t, ttl } if t == token => Some(*ttl),
                _ => None,
            })
            .collect();
        if ttls.len() >= majority {
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let ttl = ttls[majority - 1];
            let valid_for = ttl.saturating_sub(elapsed).saturating_sub(quorum.drift(ttl));
            return Verdict::Held {
                token: token.clone(),
                valid_for,
            };
        }
    }
    Verdict::Indeterminate
}

/// A value as text; bytes that are not UTF-8 become U+FFFD.
fn lossy(value: Vec<u8>) -> String {
    String::from_utf8(value).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
