//! What a store says of one lock, for operators: [`Inspection`] (who holds
//! it, per member) and [`UnlockReport`] (what clearing it did).

use std::time::Duration;

#[cfg(doc)]
use crate::Redlock;
use crate::error::NodeErrorKind;

mod unlock;

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
