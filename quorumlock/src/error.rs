//! The one error type of the crate.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Everything that can go wrong when taking, extending or releasing a lock,
/// or running an operation under an idempotency key.
///
/// The variants separate what a caller handles differently: contention
/// ([`Error::Held`]: wait or give up), outage ([`Error::Unreachable`]: alert,
/// retry later), a lock that is no longer ours ([`Error::Lost`]: stop the
/// critical section), not enough time left ([`Error::ValidityUsedUp`]), a
/// mistake in the settings ([`Error::Config`]: fix the code) and a client
/// that was shut down ([`Error::Closed`]). An idempotency key's run has
/// errors of its own besides these
/// ([`IdempotencyError`](crate::IdempotencyError)).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the resource: enough nodes refused that, with the
    /// nodes that failed, no majority could be reached, while the failed
    /// nodes alone would not have ruled one out. Busy, not an outage: with
    /// one of three nodes down for maintenance, a held lock is still just
    /// held. The failed nodes are listed all the same, for monitoring. On a
    /// fenced lock, a node that had seen a newer fence than the one the
    /// attempt proposed refuses too (another owner took the resource since).
    #[error(
        "resource is held by another owner ({refused} of {nodes} nodes refused{}{})",
        if errors.is_empty() { "" } else { "; failed" },
        NodeErrors(errors)
    )]
    Held {
        /// Nodes that answered "held by someone else".
        refused: usize,
        /// Nodes configured.
        nodes: usize,
        /// The nodes that failed or timed out meanwhile, with their errors.
        errors: Vec<NodeError>,
    },
    /// Too many nodes failed or timed out to confirm a majority.
    #[error("{}", Unreachable { succeeded: *succeeded, refused: *refused, quorum: *quorum, nodes: *nodes, errors })]
    Unreachable {
        /// Nodes that confirmed the operation.
        succeeded: usize,
        /// Nodes that answered but refused (the key belongs to another owner).
        refused: usize,
        /// Nodes needed for a majority.
        quorum: usize,
        /// Nodes configured.
        nodes: usize,
        /// What went wrong on each failing node.
        errors: Vec<NodeError>,
    },
    /// A majority was reached, but it took so long that no validity was left
    /// (or less than the configured minimum). The keys were released.
    #[error(
        "validity used up: the operation took {elapsed:?} of the {ttl:?} ttl, leaving less than the minimum validity {min:?} after the drift allowance"
    )]
    ValidityUsedUp {
        /// Time the operation took, measured on the monotonic clock.
        elapsed: Duration,
        /// The ttl used: the one asked for, cut to whole milliseconds.
        ttl: Duration,
        /// The minimum validity the caller required.
        min: Duration,
    },
    /// The lock is no longer ours on a majority of nodes (its keys expired or
    /// belong to another owner), or its validity ran out.
    #[error("lock lost: only {confirmed} of {nodes} nodes still confirm our token, {quorum} needed")]
    Lost {
        /// Nodes that still confirmed our token.
        confirmed: usize,
        /// Nodes needed for a majority.
        quorum: usize,
        /// Nodes configured.
        nodes: usize,
    },
    /// Invalid settings or input: fix the call, retrying will not help.
    /// [`ConfigError::setting`] says which setting or input.
    #[error("invalid configuration: {0}")]
    Config(ConfigError),
    /// The client was shut down ([`Redlock::shutdown`](crate::Redlock::shutdown)):
    /// it takes no new lock, and it released the locks it held.
    #[error("client shut down")]
    Closed,
}

/// What went wrong on one node.
#[derive(Debug, Clone)]
pub struct NodeError {
    /// The node's address (`host:port/db`, never the password).
    pub node: String,
    /// The failure.
    pub kind: NodeErrorKind,
}

/// The failure behind a [`NodeError`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No reply within the per-node timeout.
    Timeout(Duration),
    /// An etcd cluster refused or failed a request (no leader, a lease not
    /// found, a connection error): what failed, with the client's error as
    /// its source.
    Etcd(StoreFailure),
    /// A ZooKeeper ensemble refused or failed a request (connection loss, an
    /// expired session, no quorum): what failed, with the client's error as
    /// its source.
    ZooKeeper(StoreFailure),
    /// The connection or the server reported an error.
    Redis(redis::RedisError),
    /// Replica-acknowledged mode ([`crate::ReplicaAck`]): the node performed
    /// the write, but fewer of its replicas than required acknowledged it
    /// within the timeout, so it does not count (after an acquire, our keys
    /// there were deleted again).
    ReplicasMissing {
        /// Replicas that acknowledged the write.
        acked: u32,
        /// Replicas required.
        required: u32,
        /// How long the node waited for them.
        timeout: Duration,
    },
    /// The node's clock runs so fast against the client's (measured from
    /// its `TIME` readings) that a key set there expires before the lock
    /// could be of use: its grants and renewals do not count until its
    /// clock is put right (it still gets every release).
    ClockTooFast {
        /// The highest rate the node's clock may be running at: seconds of
        /// its clock per second of the client's.
        rate: f64,
    },
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            NodeErrorKind::Timeout(t) => write!(f, "{}: no reply within {t:?}", self.node),
            NodeErrorKind::Redis(e) => write!(f, "{}: {e}", self.node),
            NodeErrorKind::Etcd(e) | NodeErrorKind::ZooKeeper(e) => write!(f, "{}: {e}", self.node),
            NodeErrorKind::ReplicasMissing {
                acked,
                required,
                timeout,
            } => write!(
                f,
                "{}: only {acked} of {required} required replicas acknowledged the write within {timeout:?}",
                self.node
            ),
            NodeErrorKind::ClockTooFast { rate } => write!(
                f,
                "{}: its clock runs up to {rate:.3} times as fast as the client's, too fast for a key there to last",
                self.node
            ),
        }
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            NodeErrorKind::Timeout(_)
            | NodeErrorKind::ReplicasMissing { .. }
            | NodeErrorKind::ClockTooFast { .. } => None,
            NodeErrorKind::Etcd(e) | NodeErrorKind::ZooKeeper(e) => Some(e),
            NodeErrorKind::Redis(e) => Some(e),
        }
    }
}

/// What failed on an etcd cluster or a ZooKeeper ensemble, in the store's
/// terms, with the client's own error as the [`source`](std::error::Error::source)
/// when there is one.
#[derive(Debug, Clone)]
pub struct StoreFailure {
    what: Cow<'static, str>,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

// Made only by the etcd and ZooKeeper backends.
#[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
impl StoreFailure {
    /// A failure the store's answer showed (no client error behind it).
    pub(crate) fn new(what: impl Into<Cow<'static, str>>) -> StoreFailure {
        StoreFailure {
            what: what.into(),
            source: None,
        }
    }

    /// `what` failed with the client's `error`.
    pub(crate) fn caused_by(
        what: impl Into<Cow<'static, str>>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreFailure {
        StoreFailure {
            what: what.into(),
            source: Some(Arc::new(error)),
        }
    }

    /// What failed: the request, or what its answer showed.
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{}: {source}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for StoreFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

/// [`Error::Unreachable`]'s message: in a cluster's own words when the one
/// member is an etcd cluster or a ZooKeeper ensemble, else the Redlock count.
struct Unreachable<'a> {
    succeeded: usize,
    refused: usize,
    quorum: usize,
    nodes: usize,
    errors: &'a [NodeError],
}

impl fmt::Display for Unreachable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = match self.errors {
            [NodeError { node, .. }] if node.starts_with("etcd") => Some("etcd cluster"),
            [NodeError { node, .. }] if node.starts_with("zk://") => Some("ZooKeeper ensemble"),
            _ => None,
        };
        match (store, self.errors) {
            (Some(store), [error]) => {
                write!(f, "{store} {} unreachable: {}", error.node, Failure(&error.kind))
            }
            _ => write!(
                f,
                "quorum unreachable: {} of {} nodes succeeded, {} needed ({} refused, {} failed){}",
                self.succeeded,
                self.nodes,
                self.quorum,
                self.refused,
                self.errors.len(),
                NodeErrors(self.errors)
            ),
        }
    }
}

/// A node error's failure without the node's name.
struct Failure<'a>(&'a NodeErrorKind);

impl fmt::Display for Failure<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            NodeErrorKind::Timeout(t) => write!(f, "no reply within {t:?}"),
            NodeErrorKind::Etcd(e) | NodeErrorKind::ZooKeeper(e) => write!(f, "{e}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Formats per-node errors as `: a: ..; b: ..` (nothing when empty).
pub(crate) struct NodeErrors<'a>(pub(crate) &'a [NodeError]);

impl fmt::Display for NodeErrors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Config`] about `setting`.
    pub(crate) fn config(setting: Setting, message: impl Into<String>) -> Error {
        Error::Config(ConfigError::new(setting, message))
    }

    /// [`Error::Unreachable`] for a store that counts as one member (an etcd
    /// cluster, a fenced write's data store), which failed with `kind`.
    pub(crate) fn unreachable_store(node: String, kind: NodeErrorKind) -> Error {
        Error::Unreachable {
            succeeded: 0,
            refused: 0,
            quorum: 1,
            nodes: 1,
            errors: vec![NodeError { node, kind }],
        }
    }
}

/// What is wrong with a setting or an input: which one ([`Setting`]), and a
/// message for people.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{Error, Redlock, Setting};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let redlock = Redlock::builder().node("redis://127.0.0.1:1").build().unwrap();
/// match redlock.try_lock("job", Duration::ZERO).await {
///     Err(Error::Config(error)) if error.setting() == Setting::Ttl => {
///         eprintln!("choose another ttl: {error}");
///     }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    setting: Setting,
    message: String,
}

impl ConfigError {
    /// An error about `setting`, explained by `message`.
    pub fn new(setting: Setting, message: impl Into<String>) -> Self {
        ConfigError {
            setting,
            message: message.into(),
        }
    }

    /// The setting or input that is wrong.
    pub fn setting(&self) -> Setting {
        self.setting
    }

    /// What is wrong with it, for people.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The setting or input an [`Error::Config`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// The node URLs: none given, a bad URL, a transport this build lacks.
    Nodes,
    /// [`RedlockBuilder::node_timeout`](crate::RedlockBuilder::node_timeout).
    NodeTimeout,
    /// [`RedlockBuilder::connect_timeout`](crate::RedlockBuilder::connect_timeout).
    ConnectTimeout,
    /// [`RedlockBuilder::drift`](crate::RedlockBuilder::drift): factor or fixed part.
    Drift,
    /// [`RedlockBuilder::replica_ack`](crate::RedlockBuilder::replica_ack).
    ReplicaAck,
    /// [`RedlockBuilder::heal`](crate::RedlockBuilder::heal).
    Heal,
    /// [`RedlockBuilder::batching`](crate::RedlockBuilder::batching).
    Batching,
    /// A lock's ttl: outside its bounds, or leaving no validity.
    Ttl,
    /// A lock's resources: none, an empty or reserved name, a duplicate, too many.
    Resources,
    /// [`LockOptions::max_attempts`](crate::LockOptions::max_attempts).
    MaxAttempts,
    /// [`LockOptions::retry_delay`](crate::LockOptions::retry_delay).
    RetryDelay,
    /// [`LockOptions::min_hold`](crate::LockOptions::min_hold).
    MinHold,
    /// A duration written as text (`30s`, `500ms`).
    Duration,
    /// An environment variable that `from_env` reads, by name.
    Env(&'static str),
    /// An idempotency key, or what is stored under it.
    IdempotencyKey,
    /// [`Idempotency::result_ttl`](crate::Idempotency::result_ttl).
    ResultTtl,
    /// A lock token given to an operator call.
    Token,
    /// A fenced write's operation, or the data it met.
    FencedWrite,
    /// The blocking client's runtime.
    Runtime,
    /// A semaphore's name or number of permits
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)).
    Semaphore,
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_cluster_failure_says_which_store_and_keeps_its_cause() {
        let cause = std::io::Error::other("no leader");
        let kind = NodeErrorKind::Etcd(StoreFailure::caused_by("request", cause));
        let error = Error::unreachable_store("etcd://10.0.0.1:2379".into(), kind);
        assert_eq!(
            error.to_string(),
            "etcd cluster etcd://10.0.0.1:2379 unreachable: request: no leader"
        );
        let Error::Unreachable { errors, .. } = &error else {
            panic!("{error:?}");
        };
        let failure = errors[0].source().expect("the store's failure");
        assert_eq!(
            failure.source().expect("the client's error").to_string(),
            "no leader"
        );
        let redis = Error::unreachable_store(
            "redis://10.0.0.1".into(),
            NodeErrorKind::Timeout(Duration::from_millis(5)),
        );
        assert!(
            redis.to_string().starts_with("quorum unreachable: 0 of 1 nodes"),
            "{redis}"
        );
    }
}
