//! Replica-acknowledged mode (`WAIT`) for nodes that are a master with
//! replicas. The user's side of it (what it guarantees and what it does not)
//! is documented on [`ReplicaAck`]; this is how it works.
//!
//! Every write that takes or keeps a lock on a node (acquire, extend, the
//! watchdog's renewal: the requests whose `writes_lock` is true) is sent
//! together with `WAIT numreplicas timeout` as one pipeline (`Node::send`
//! and `Node::send_pipeline`), and the node's answer counts only if `WAIT`
//! reported enough replicas:
//!
//! - acquire: a grant the replicas did not acknowledge is deleted again
//!   (owner-checked, on the same connection, awaited) before the node reports
//!   [`NodeErrorKind::ReplicasMissing`], so that a node that counts as failed
//!   keeps no key of ours even when the attempt as a whole succeeds (unless
//!   that delete fails, or the node's deadline cuts it off; the key then
//!   expires with its ttl);
//! - extend and renewal: the node does not confirm, and nothing is deleted
//!   (a failed extend never deletes). So every validity a guard reports rests
//!   on writes the replicas acknowledged: the key and ttl of the last
//!   confirmed round are on the replicas even if a later round's are not;
//! - release: no `WAIT`. A release lost in a failover leaves the key to
//!   expire with its ttl, which delays other owners and never lets two in.
//!
//! Why one pipeline: `WAIT` waits for the writes of the client (connection)
//! it is sent on, tracked by the server per connection. Sent on any other
//! connection, such as a fresh one after a reconnect between the two
//! commands, it has nothing to wait for and reports every connected replica
//! at once, a false confirmation. In one pipeline both commands go to the
//! same connection or fail together.
//!
//! Why the `WAIT` timeout must be shorter than the per-node timeout (checked
//! in [`crate::RedlockBuilder::build`]): the per-node deadline covers the
//! write and the `WAIT` together. A `WAIT` allowed to run longer would turn a
//! healthy node with a slow replica into a timed-out one, and the owner-checked
//! delete that follows a short `WAIT` would run after the caller stopped
//! listening.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::backend::redlock::wire;
use crate::config::DEFAULT_REPLICA_ACK_TIMEOUT;
use crate::error::{Error, NodeErrorKind, Result, Setting};

/// Replica-acknowledged mode: a lock write counts on a node only once this
/// many of its replicas acknowledged it (`WAIT numreplicas timeout`).
///
/// For deployments that run one Redis master with replicas (and Sentinel)
/// rather than independent masters. Replication is asynchronous: the master
/// answers the `SET` that takes a lock before its replicas have the key, and
/// if it dies in that window and a replica is promoted, the new master has no
/// key and a second client gets the lock while the first still holds it.
///
/// Set on a client with [`crate::RedlockBuilder::replica_ack`], it applies
/// to every node of the client. After each acquire, extend and watchdog
/// renewal, the node is sent `WAIT` on the same connection, and it counts
/// only if enough replicas acknowledged the write. An acquisition that a
/// node's replicas did not acknowledge is deleted there again (owner-checked),
/// and the node fails with [`crate::NodeErrorKind::ReplicasMissing`]; an
/// extend or renewal they did not acknowledge does not count as confirmed.
/// With one node this is the plain "`SET NX`, then `WAIT`" recipe; with
/// several nodes, each a master with replicas, it strengthens every member of
/// the quorum.
///
/// # What it guarantees, and what it does not
///
/// When a lock is granted, and again after every confirmed renewal or
/// extend, the required number of replicas of each node in the majority hold
/// its key, with an expiry no earlier than the guard's validity: promoting
/// one of them keeps the lock.
///
/// - The key is in their **memory**, not on their disk: a replica that
///   acknowledged and then crashed or lost power can still lose it (Redis
///   7.2's `WAITAOF` waits for the fsync; this mode does not use it).
/// - A failover can promote a replica that was **not** among the acknowledged
///   ones (one of three acknowledged, another is promoted), and that replica
///   may lack the key. Sentinel prefers the replica with the most replicated
///   data, which is a preference, not a promise: require as many
///   acknowledgements as there are replicas that may be promoted, or set
///   `replica-priority 0` on the others.
/// - It narrows the window in which a failover loses a lock; it does not make
///   a single master as safe as a majority of independent masters. A master
///   that restarts empty, a `FLUSHALL`, or a promotion as above still lose
///   the lock. Protect writes that must never run twice with fencing
///   ([`crate::Guard::fence_token`]) or idempotency keys
///   ([`crate::Idempotency`]) as well; note that neither their records nor
///   releases are followed by `WAIT`.
///
/// # Costs
///
/// `WAIT` blocks the connection it runs on, and a client sends all its
/// requests to a node over one connection. With healthy replicas that costs
/// one master-to-replica round trip per acquire, extend and renewal. While a
/// replica is down or lagging, each of them holds the node's connection for
/// up to the timeout, and other requests to that node queue behind it; a
/// refused acquire is followed by a `WAIT` too (it is pipelined), which
/// returns at once unless the replicas lag. Keep the timeout short. A replica
/// that has just connected counts only from its first acknowledgement to the
/// master, up to a second after its initial sync.
///
/// The timeout must be at least 1 ms (`WAIT` with 0 would block until the
/// replicas answer, however long that takes) and shorter than the client's
/// per-node timeout, which bounds the write and its `WAIT` together.
///
/// # Examples
///
/// One master with two replicas behind Sentinel; a lock counts once at least
/// one replica has it:
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{Error, Redlock, ReplicaAck};
///
/// # fn main() -> Result<(), Error> {
/// let redlock = Redlock::builder()
///     .node("redis://redis-master.internal:6379")
///     .node_timeout(Duration::from_millis(200))
///     .replica_ack(ReplicaAck::new(1).with_timeout(Duration::from_millis(100)))
///     .build()?;
/// assert_eq!(redlock.quorum(), 1);
///
/// // A WAIT allowed to outlast the node timeout is a configuration error:
/// // the node would look timed out while its replicas were still answering.
/// let too_long = Redlock::builder()
///     .node("redis://redis-master.internal:6379")
///     .node_timeout(Duration::from_millis(200))
///     .replica_ack(ReplicaAck::new(1).with_timeout(Duration::from_millis(200)))
///     .build();
/// assert!(matches!(too_long, Err(Error::Config(_))));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct ReplicaAck {
    replicas: u32,
    timeout: Duration,
}

impl ReplicaAck {
    /// Requires `replicas` acknowledgements (at least 1) within
    /// [`DEFAULT_REPLICA_ACK_TIMEOUT`].
    pub const fn new(replicas: u32) -> Self {
        ReplicaAck {
            replicas,
            timeout: DEFAULT_REPLICA_ACK_TIMEOUT,
        }
    }

    /// How long the node waits for the acknowledgements (whole
    /// milliseconds, at least 1, shorter than the per-node timeout). The
    /// default is [`DEFAULT_REPLICA_ACK_TIMEOUT`].
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The number of replicas that must acknowledge.
    pub const fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long the node waits for them.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Checks the setting against the client's per-node timeout.
    pub(crate) fn validate(&self, node_timeout: Duration) -> Result<()> {
        if self.replicas == 0 {
            return Err(Error::config(
                Setting::ReplicaAck,
                "replica ack needs at least 1 replica: WAIT 0 confirms nothing",
            ));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(Error::config(
                Setting::ReplicaAck,
                format!(
                    "replica ack timeout must be at least 1 ms, got {:?}: WAIT with a timeout of 0 \
                 blocks until the replicas answer, however long that takes",
                    self.timeout
                ),
            ));
        }
        if self.timeout >= node_timeout {
            return Err(Error::config(
                Setting::ReplicaAck,
                format!(
                    "replica ack timeout {:?} must be shorter than the node timeout {node_timeout:?}: \
                 the node timeout bounds the write and its WAIT together, so a healthy node \
                 whose replicas answer late would count as timed out",
                    self.timeout
                ),
            ));
        }
        Ok(())
    }

    /// `WAIT numreplicas timeout_ms`.
    pub(crate) fn wait(&self) -> Cmd {
        wire::replica::wait(self.replicas, self.timeout)
    }

    /// Judges the reply to [`ReplicaAck::wait`]: enough replicas, or the
    /// node's error ([`NodeErrorKind::ReplicasMissing`], or the server's error
    /// when `WAIT` itself failed).
    pub(crate) fn check(&self, reply: Value) -> Acked<()> {
        let acked = wire::replica::acknowledged(reply).map_err(NodeErrorKind::Redis)?;
        if acked >= i64::from(self.replicas) {
            return Ok(());
        }
        Err(NodeErrorKind::ReplicasMissing {
            acked: u32::try_from(acked).unwrap_or(0),
            required: self.replicas,
            timeout: self.timeout,
        })
    }
}

/// A node's reply that counts only if its replicas acknowledged it: the
/// reply, or the reason the node does not count although it answered.
pub(crate) type Acked<T> = std::result::Result<T, NodeErrorKind>;

#[cfg(test)]
mod tests {
    use super::*;

    const NODE_TIMEOUT: Duration = Duration::from_millis(100);

    #[test]
    fn the_default_fits_the_default_node_timeout() {
        assert!(ReplicaAck::new(1).validate(crate::DEFAULT_NODE_TIMEOUT).is_ok());
    }

    #[test]
    fn settings_that_confirm_nothing_or_outlast_the_node_are_rejected() {
        let ms = Duration::from_millis;
        assert!(ReplicaAck::new(0).validate(NODE_TIMEOUT).is_err());
        for timeout in [Duration::ZERO, Duration::from_micros(999), ms(100), ms(500)] {
            let ack = ReplicaAck::new(1).with_timeout(timeout);
            assert!(ack.validate(NODE_TIMEOUT).is_err(), "{timeout:?}");
        }
        assert!(
            ReplicaAck::new(2)
                .with_timeout(ms(99))
                .validate(NODE_TIMEOUT)
                .is_ok()
        );
    }

    #[test]
    fn too_few_acknowledgements_name_the_counts() {
        let ack = ReplicaAck::new(2);
        assert!(ack.check(Value::Int(2)).is_ok());
        assert!(ack.check(Value::Int(3)).is_ok());
        match ack.check(Value::Int(1)) {
            Err(NodeErrorKind::ReplicasMissing {
                acked: 1,
                required: 2,
                timeout,
            }) => assert_eq!(timeout, DEFAULT_REPLICA_ACK_TIMEOUT),
            other => panic!("expected ReplicasMissing, got {other:?}"),
        }
        assert!(matches!(ack.check(Value::Nil), Err(NodeErrorKind::Redis(_))));
    }
}
