//! `Redlock::builder()`: nodes and settings, validated into a client.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::redlock::masters::Masters;
use crate::backend::redlock::node::{Node, ReplicaAck, Settings};
use crate::backend::redlock::quorum::Quorum;
use crate::backend::{self, Backend};
use crate::client::Redlock;
use crate::config::{
    DEFAULT_BATCHING, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED, DEFAULT_HEAL,
    DEFAULT_NODE_TIMEOUT, MAX_TTL, Timing,
};
use crate::error::{Error, Result, Setting};
use crate::options::LockOptions;
use crate::redact::redact_url;
use crate::tasks::Tasks;

/// One node as given to the builder, parsed in [`RedlockBuilder::build`].
// Built once per node at configuration time; with `tls` a client is large,
// which costs nothing here.
#[allow(clippy::large_enum_variant)]
enum NodeSpec {
    Url(String),
    Client(redis::Client),
}

/// Never shows a password: a URL redacted, a client by its address.
impl fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeSpec::Url(url) => f.debug_tuple("Url").field(&redact_url(url)).finish(),
            NodeSpec::Client(client) => {
                let info = client.get_connection_info();
                let name = format!("{}/{}", info.addr(), info.redis_settings().db());
                f.debug_tuple("Client").field(&name).finish()
            }
        }
    }
}

impl Redlock {
    /// Starts configuring a client.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }
}

/// Builds a [`Redlock`] client. Created by [`Redlock::builder`].
///
/// Every setting has a default (the `DEFAULT_*` constants); only the nodes are
/// required. Nothing connects until the first lock request.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// let redlock = Redlock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .node_timeout(Duration::from_millis(50))
///     .build()
///     .unwrap();
/// assert_eq!(redlock.quorum(), 2);
/// ```
#[derive(Debug)]
#[must_use]
pub struct RedlockBuilder {
    nodes: Vec<NodeSpec>,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    drift_fixed: Duration,
    /// Set by [`RedlockBuilder::heal`]; the default otherwise.
    heal: Option<bool>,
    /// Set by [`RedlockBuilder::batching`]; the default otherwise.
    batching: Option<bool>,
    replica_ack: Option<ReplicaAck>,
    /// Set by `RedlockBuilder::dialer` (`crate::sim`).
    #[cfg(feature = "sim")]
    pub(crate) dialer: crate::sim::DialerSetting,
    options: LockOptions,
    /// Set by the lock-setting shortcuts, applied over `options` at
    /// `build`, so that the order of the calls does not matter.
    shortcuts: Shortcuts,
}

/// The lock settings set through the builder's shortcuts.
#[derive(Debug, Default)]
struct Shortcuts {
    retry_delay: Option<Duration>,
    wait: Option<Duration>,
    max_attempts: Option<u32>,
    min_validity: Option<Duration>,
    auto_renew: Option<bool>,
}

impl Shortcuts {
    /// `options` with every shortcut that was set.
    fn apply(&self, mut options: LockOptions) -> LockOptions {
        if let Some(delay) = self.retry_delay {
            options = options.retry_delay(delay);
        }
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        if let Some(attempts) = self.max_attempts {
            options = options.max_attempts(attempts);
        }
        if let Some(min) = self.min_validity {
            options = options.min_validity(min);
        }
        if let Some(on) = self.auto_renew {
            options = options.auto_renew(on);
        }
        options
    }
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        RedlockBuilder {
            nodes: Vec::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            drift_fixed: DEFAULT_DRIFT_FIXED,
            heal: None,
            batching: None,
            replica_ack: None,
            #[cfg(feature = "sim")]
            dialer: crate::sim::DialerSetting::default(),
            options: LockOptions::default(),
            shortcuts: Shortcuts::default(),
        }
    }
}

impl RedlockBuilder {
    /// Adds a node by URL: `redis://[user][:password@]host[:port][/db]`,
    /// `rediss://` (feature `tls`) or `unix:///path`. Each node must be an
    /// independent master: replicas of one another do not add safety.
    ///
    /// A node may also be a whole Redis Cluster,
    /// `redis+cluster://[user:password@]host:port[,host:port...]` (any of its
    /// nodes as seeds; `rediss+cluster://` with `tls`), or the master that
    /// Redis Sentinel manages under a name,
    /// `redis+sentinel://[user:password@]host:port[,host:port...]/name[/db]`
    /// (the sentinels' addresses; the credentials and database are the
    /// master's). Either counts once in the quorum, beside other nodes. On a
    /// cluster, the resources of one lock must share a hash slot (one hash
    /// tag, as in `{order:42}:stock`).
    ///
    /// ```
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// let redlock = quorumlock::Redlock::builder()
    ///     .node("redis+cluster://10.0.1.1:7000,10.0.1.2:7000")
    ///     .node("redis+cluster://10.0.2.1:7000,10.0.2.2:7000")
    ///     .node("redis+sentinel://10.0.3.1:26379,10.0.3.2:26379/locks")
    ///     .build()?;
    /// assert_eq!((redlock.nodes(), redlock.quorum()), (3, 2));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Or, with the `etcd` feature, a whole etcd cluster as the only node:
    /// `etcd://[user:password@]host:port[,host:port...][/prefix]` (`etcds://`
    /// with `tls`, trusting the system's roots, or the CA of
    /// `?ca=/path/ca.pem`, and showing the client certificate of
    /// `&cert=/path/client.pem&key=/path/client.key` where the members ask
    /// for one). Its locks are then taken as etcd's own
    /// `concurrency.Mutex` takes them, under one lease per lock; the
    /// cluster's Raft quorum replaces the Redlock majority. The URL may
    /// also come split at its commas (`["etcd://h1:2379", "h2:2379"]`).
    ///
    /// Or, with the `zookeeper` feature, a whole ZooKeeper ensemble:
    /// `zk://[user:password@]host:port[,host:port...][/chroot][?session_timeout=10s]`.
    /// Its locks are then taken as ZooKeeper's lock recipe (and python's
    /// kazoo `Lock`) takes them: an ephemeral sequential node per lock in
    /// the client's one session, whose timeout (10 s unless the URL says
    /// otherwise, within the ensemble's bounds) is how long a dead client's
    /// locks outlive it. The ensemble's ZAB quorum replaces the Redlock
    /// majority. This URL too may come split at its commas.
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(NodeSpec::Url(url.into()));
        self
    }

    /// Adds several nodes by URL (see [`RedlockBuilder::node`]).
    pub fn nodes<I>(mut self, urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.nodes
            .extend(urls.into_iter().map(|u| NodeSpec::Url(u.into())));
        self
    }

    /// Adds a node from a ready-made client (custom TLS, credentials, ...).
    pub fn client(mut self, client: redis::Client) -> Self {
        self.nodes.push(NodeSpec::Client(client));
        self
    }

    /// Time each node has to answer one request. The default is
    /// [`DEFAULT_NODE_TIMEOUT`]. Must be shorter than every ttl you use.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Time to establish a connection to a node. The default is
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Clock drift allowance `ttl * factor + fixed`, subtracted from every
    /// validity. The defaults are [`DEFAULT_DRIFT_FACTOR`] and
    /// [`DEFAULT_DRIFT_FIXED`]. `factor` must be in `[0, 1)`.
    pub fn drift(mut self, factor: f64, fixed: Duration) -> Self {
        self.drift_factor = factor;
        self.drift_fixed = fixed;
        self
    }

    /// Whether renewals re-create our key on nodes that lost it. The
    /// default is [`DEFAULT_HEAL`].
    pub fn heal(mut self, on: bool) -> Self {
        self.heal = Some(on);
        self
    }

    /// Replica-acknowledged mode for nodes that are a master with replicas
    /// (Sentinel): every acquire, extend and renewal on a node counts only
    /// once `ack.replicas()` of its replicas acknowledged it (`WAIT`). Off by
    /// default. Read [`ReplicaAck`] for what it does and does not guarantee.
    pub fn replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.replica_ack = Some(ack);
        self
    }

    /// Whether concurrent acquires and releases to a node are sent together
    /// as one pipeline. The default is [`DEFAULT_BATCHING`].
    pub fn batching(mut self, on: bool) -> Self {
        self.batching = Some(on);
        self
    }

    /// The client's lock settings (see [`LockOptions`]). The shortcuts
    /// below ([`retry_delay`](Self::retry_delay), [`wait`](Self::wait),
    /// [`max_attempts`](Self::max_attempts),
    /// [`min_validity`](Self::min_validity),
    /// [`auto_renew`](Self::auto_renew)) win over the same fields of these
    /// options, whichever is called first; the other fields come from here.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorumlock::{LockOptions, Redlock};
    ///
    /// // The shortcut set before `options` is kept.
    /// let redlock = Redlock::builder()
    ///     .node("redis://127.0.0.1:6379")
    ///     .auto_renew(false)
    ///     .options(LockOptions::new().fenced(true).min_hold(Duration::from_secs(60)))
    ///     .build()
    ///     .unwrap();
    /// assert!(!redlock.options().renews());
    /// ```
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Mean delay between attempts of [`Redlock::lock`] (see
    /// [`LockOptions::retry_delay`] for how it combines with release
    /// announcements).
    /// The default is [`crate::DEFAULT_RETRY_DELAY`]. See [`LockOptions::retry_delay`].
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.shortcuts.retry_delay = Some(delay);
        self
    }

    /// How long [`Redlock::lock`] keeps trying. The default is
    /// [`crate::DEFAULT_WAIT`]. See [`LockOptions::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.shortcuts.wait = Some(wait);
        self
    }

    /// Stop [`Redlock::lock`] after this many attempts even if the wait has
    /// not run out. The default is no limit besides the wait.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.shortcuts.max_attempts = Some(attempts);
        self
    }

    /// Minimum validity an acquisition must leave. The default is
    /// [`crate::DEFAULT_MIN_VALIDITY`]. See [`LockOptions::min_validity`].
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.shortcuts.min_validity = Some(min);
        self
    }

    /// Whether the shared watchdog renews held locks. On by default. See
    /// [`LockOptions::auto_renew`].
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.shortcuts.auto_renew = Some(on);
        self
    }

    /// Checks the node list and the timing settings (see [`Self::build`]).
    fn check_timing(&self) -> Result<()> {
        if self.nodes.is_empty() {
            return Err(Error::config(Setting::Nodes, "no nodes given"));
        }
        for (setting, what, value) in [
            (Setting::NodeTimeout, "node timeout", self.node_timeout),
            (Setting::ConnectTimeout, "connect timeout", self.connect_timeout),
        ] {
            if value.is_zero() || value > MAX_TTL {
                return Err(Error::config(
                    setting,
                    format!("{what} must be greater than zero and at most {MAX_TTL:?}, got {value:?}"),
                ));
            }
        }
        if self.drift_fixed > MAX_TTL {
            return Err(Error::config(
                Setting::Drift,
                format!(
                    "fixed drift must be at most {MAX_TTL:?}, got {:?}",
                    self.drift_fixed
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(Error::config(
                Setting::Drift,
                format!("drift factor must be in [0, 1), got {}", self.drift_factor),
            ));
        }
        Ok(())
    }

    /// Checks the settings and creates the client. Does not connect.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty node list, a URL that does not parse,
    /// a zero node or connect timeout, a drift factor outside `[0, 1)`,
    /// zero attempts, or a [`ReplicaAck`] for no replica or whose timeout is
    /// below 1 ms or not shorter than the node timeout.
    /// An even number of nodes is allowed but logged as a warning: it needs
    /// as large a majority as one node more would, and tolerates no more
    /// failures.
    pub fn build(self) -> Result<Redlock> {
        self.check_timing()?;
        let options = self.shortcuts.apply(self.options.clone());
        options.validate()?;
        if let Some(ack) = &self.replica_ack {
            ack.validate(self.node_timeout)?;
        }
        let tasks = Arc::new(Tasks::default());
        if let Some(backend) = self.other_backend(&tasks)? {
            return Ok(Redlock::new(backend, options));
        }
        let settings = Settings {
            connect_timeout: self.connect_timeout,
            tasks: Arc::clone(&tasks),
            batching: self.batching.unwrap_or(DEFAULT_BATCHING),
            replica_ack: self.replica_ack,
            #[cfg(feature = "sim")]
            dialer: self.dialer.0.clone(),
        };
        let nodes = self
            .nodes
            .into_iter()
            .map(|spec| match spec {
                NodeSpec::Client(client) => Ok(Node::from_client(client, &settings)),
                NodeSpec::Url(url) => {
                    Node::open(&url, &settings).map_err(|e| Error::config(Setting::Nodes, e))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if nodes.len() % 2 == 0 {
            tracing::warn!(
                nodes = nodes.len(),
                "even number of nodes: tolerates no more failures than one node fewer"
            );
        }
        let quorum = Quorum {
            nodes: nodes.into(),
            tasks,
            node_timeout: self.node_timeout,
            drift_factor: self.drift_factor,
            drift_fixed: self.drift_fixed,
        };
        let masters = Masters::new(quorum, self.heal.unwrap_or(DEFAULT_HEAL));
        Ok(Redlock::new(Backend::Redlock(Arc::new(masters)), options))
    }

    /// The backend other than Redis that the node URLs name, if any (see
    /// [`backend::cluster`]).
    fn other_backend(&self, tasks: &Arc<Tasks>) -> Result<Option<Backend>> {
        let urls: Vec<&str> = self
            .nodes
            .iter()
            .filter_map(|spec| match spec {
                NodeSpec::Url(url) => Some(url.as_str()),
                NodeSpec::Client(_) => None,
            })
            .collect();
        let timing = Timing {
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            drift_factor: self.drift_factor,
            drift_fixed: self.drift_fixed,
        };
        let cluster = backend::cluster(&urls, self.nodes.len(), timing, tasks)?;
        if cluster.is_some() {
            let set = [
                self.replica_ack.is_some(),
                self.heal.is_some(),
                self.batching.is_some(),
            ];
            backend::refuse_redis_settings(set)?;
        }
        Ok(cluster)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_never_prints_a_password() {
        let builder = RedlockBuilder::default()
            .node("redis://app:s3cret@127.0.0.1:6379")
            .client(redis::Client::open("redis://:s3cret@127.0.0.1:6380").unwrap());
        let shown = format!("{builder:?}");
        let shown = format!("{shown} {:?}", builder.build().unwrap());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("127.0.0.1:6379"), "{shown}");
    }

    /// The shortcuts win over the same fields of `options(...)`, in either
    /// order, and the other fields of `options(...)` stay.
    #[test]
    fn shortcuts_and_options_compose_in_either_order() {
        let (wait, delay, min, hold) = (
            Duration::from_secs(7),
            Duration::from_millis(300),
            Duration::from_millis(40),
            Duration::from_secs(60),
        );
        let options = LockOptions::new()
            .wait(Duration::from_secs(1))
            .fenced(true)
            .min_hold(hold);
        let shortcuts = |builder: RedlockBuilder| {
            builder
                .wait(wait)
                .retry_delay(delay)
                .max_attempts(3)
                .min_validity(min)
                .auto_renew(false)
        };
        let node = "redis://127.0.0.1:1";
        let before = shortcuts(RedlockBuilder::default().node(node)).options(options.clone());
        let after = shortcuts(RedlockBuilder::default().node(node).options(options));
        for redlock in [before.build().unwrap(), after.build().unwrap()] {
            let got = redlock.options();
            assert_eq!(
                (
                    got.wait,
                    got.retry_delay,
                    got.max_attempts,
                    got.min_validity,
                    got.auto_renew
                ),
                (wait, delay, Some(3), min, false)
            );
            assert!(got.fenced);
            assert_eq!(got.min_hold, Some(hold));
        }
    }
}
