//! What an unlock did: [`UnlockReport`] and its parts.

#[cfg(doc)]
use crate::Redlock;
use crate::error::NodeErrorKind;

/// What [`Redlock::unlock`] or [`Redlock::force_unlock`] did on each node.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = quorumlock::Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let report = redlock.force_unlock("archive:nightly").await?;
/// for node in &report.nodes {
///     eprintln!("{}: {:?}", node.node, node.outcome);
/// }
/// assert!(report.answered() >= report.quorum, "some nodes may still hold the key");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UnlockReport {
    /// The resource.
    pub resource: String,
    /// One entry per configured node, in the order they were configured.
    pub nodes: Vec<NodeUnlock>,
    /// Nodes that make a majority: `nodes / 2 + 1`.
    pub quorum: usize,
}

impl UnlockReport {
    /// Nodes where a key was deleted.
    pub fn deleted(&self) -> usize {
        self.count(|o| matches!(o, UnlockOutcome::Deleted(_)))
    }

    /// Nodes that answered (deleted, or had nothing to delete): on these the
    /// key (or, for [`Redlock::unlock`], the token) is gone.
    pub fn answered(&self) -> usize {
        self.count(|o| !matches!(o, UnlockOutcome::Failed(_)))
    }

    fn count(&self, which: impl Fn(&UnlockOutcome) -> bool) -> usize {
        self.nodes.iter().filter(|n| which(&n.outcome)).count()
    }
}

/// One node's part of an [`UnlockReport`].
///
/// # Examples
///
/// ```no_run
/// use quorumlock::UnlockOutcome;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = quorumlock::Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let report = redlock.unlock("archive:nightly", "0123456789abcdef0123456789abcdef").await?;
/// let failed = report.nodes.iter().filter(|n| matches!(n.outcome, UnlockOutcome::Failed(_)));
/// for node in failed {
///     eprintln!("{} did not answer: its key expires with its ttl", node.node);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeUnlock {
    /// The node's address (`host:port/db`, never the password).
    pub node: String,
    /// What happened there.
    pub outcome: UnlockOutcome,
}

/// What an unlock did on one node.
///
/// # Examples
///
/// ```
/// use quorumlock::{DeletedValue, UnlockOutcome};
///
/// fn log(node: &str, outcome: &UnlockOutcome) -> String {
///     match outcome {
///         UnlockOutcome::Deleted(DeletedValue::String(value)) => format!("{node}: deleted {value}"),
///         UnlockOutcome::Deleted(DeletedValue::Other { kind }) => format!("{node}: deleted a {kind}"),
///         UnlockOutcome::NotHeld => format!("{node}: nothing to delete"),
///         _ => format!("{node}: failed"),
///     }
/// }
/// assert_eq!(log("a", &UnlockOutcome::NotHeld), "a: nothing to delete");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum UnlockOutcome {
    /// The key was deleted; this is what it held.
    Deleted(DeletedValue),
    /// Nothing was deleted: no key ([`Redlock::force_unlock`]), or the key
    /// did not hold the token ([`Redlock::unlock`]).
    NotHeld,
    /// The node failed or did not answer within the node timeout; its key,
    /// if any, expires with its ttl.
    Failed(NodeErrorKind),
}

/// What a deleted key held.
///
/// # Examples
///
/// ```
/// use quorumlock::DeletedValue;
///
/// let value = DeletedValue::String("0123456789abcdef0123456789abcdef".into());
/// assert!(matches!(value, DeletedValue::String(token) if token.len() == 32));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeletedValue {
    /// A string: a lock's token (shown lossily when not UTF-8).
    String(String),
    /// Another type than a string (its Redis type name).
    Other {
        /// The Redis type (`hash`, `list`, ...).
        kind: String,
    },
}
