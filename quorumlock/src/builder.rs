//! `Redlock::builder()`: nodes, timing settings and their defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::Holders;
use crate::handoff::Handoff;
use crate::lock::Redlock;
use crate::node::Node;
use crate::options::LockOptions;
use crate::replica::ReplicaAck;
use crate::tasks::Tasks;
use crate::watchdog::Watchdog;

/// Default lock ttl for callers that have no better figure (the CLI, examples).
///
/// Long enough that a renewal or two can fail without losing the lock, short
/// enough that a crashed holder blocks others for half a minute at most.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Longest ttl a lock may have, and longest node, connect or drift time.
///
/// A lease that outlives a crashed holder by more than a year is not a
/// lease; hold longer with renewal. The bound keeps every deadline the
/// library computes (start + ttl on the monotonic clock, now + ttl in
/// milliseconds on the nodes) far from overflow, so that an absurd setting
/// is an [`Error::Config`], never a panic.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Default time each node has to answer one request.
///
/// Small next to the ttl (0.3 % of [`DEFAULT_TTL`]) so that a dead or paused
/// node costs an acquisition little validity, as the Redlock description asks
/// (5-50 ms for a 10 s ttl on a LAN); large enough for a cross-zone round trip
/// on a busy host. Raise it for nodes far away.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// Default time to establish a connection to a node (TCP, TLS, AUTH).
///
/// Larger than the per-node timeout because a handshake costs several round
/// trips. A connection is set up by the first request that needs it; an
/// acquire or extend gives up on it at its per-node deadline (the next
/// request starts over), while a release, driven for up to the lock's ttl,
/// can wait for it to complete.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Default clock drift allowance as a fraction of the ttl (1 %).
///
/// Nodes expire keys on their own clocks. The reference Redlock implementation
/// assumes they may run up to 1 % fast relative to ours.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// Default fixed part of the drift allowance (2 ms).
///
/// Redis expires keys with millisecond resolution, and expiry checks are not
/// instantaneous; the reference implementation adds 2 ms for that.
pub const DEFAULT_DRIFT_FIXED: Duration = Duration::from_millis(2);

/// Whether renewals re-create a lock's key on a node that lost it (default on).
///
/// A node restarted without persistence comes back empty; while we still hold
/// a majority elsewhere, setting our key there again (`SET NX`, same token)
/// restores the margin the lock had. It never overwrites another owner's key.
pub const DEFAULT_HEAL: bool = true;

/// Whether concurrent single-key acquires and releases to a node are
/// coalesced into one script call (default on).
///
/// A lone caller is never delayed: while fewer than eight requests are in
/// flight to a node, each goes at once as a single command. Beyond that,
/// the requests that queue while a batch is in flight go together in the
/// next script call, which saves the servers' and the client's per-command
/// overhead: with 64 and 256 concurrent lock+unlock loops on 1, 3 or 5
/// local nodes, 1.0x-1.6x the throughput of pipelined single commands,
/// against 0.5x-0.95x without batching (`cargo bench --bench throughput`,
/// tasks spawned).
///
/// Turn it off for nodes that are Redis Cluster members (a batch mixes keys
/// of any hash slot). It does not pay with a few loops on several nodes (8
/// loops on 5 nodes: about three quarters of the throughput without it), nor
/// with 64 loops driven from one task (futures joined inside one task, not
/// spawned) on one node (0.55x against 0.80x); `docs/benchmarks.md` has the
/// figures.
pub const DEFAULT_BATCHING: bool = true;

/// Settings shared by a client and all its guards.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) nodes: Arc<[Node]>,
    pub(crate) node_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_fixed: Duration,
    pub(crate) heal: bool,
    pub(crate) watchdog: Watchdog,
    pub(crate) handoff: Handoff,
    /// Every lock a guard of this client holds, for shutdown.
    pub(crate) holders: Holders,
    /// The client's background work (see `crate::tasks`).
    pub(crate) tasks: Arc<Tasks>,
}

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
    heal: bool,
    batching: bool,
    replica_ack: Option<ReplicaAck>,
    options: LockOptions,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        RedlockBuilder {
            nodes: Vec::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            drift_fixed: DEFAULT_DRIFT_FIXED,
            heal: DEFAULT_HEAL,
            batching: DEFAULT_BATCHING,
            replica_ack: None,
            options: LockOptions::default(),
        }
    }
}

impl RedlockBuilder {
    /// Adds a node by URL: `redis://[user][:password@]host[:port][/db]`,
    /// `rediss://` (feature `tls`) or `unix:///path`. Each node must be an
    /// independent master: replicas of one another do not add safety.
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
        self.heal = on;
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

    /// Whether concurrent acquires and releases to a node are sent as one
    /// script call. The default is [`DEFAULT_BATCHING`].
    pub fn batching(mut self, on: bool) -> Self {
        self.batching = on;
        self
    }

    /// The client's lock settings (see [`LockOptions`]), replacing any set
    /// with the shortcuts below.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Mean delay between attempts of [`Redlock::lock`] (see
    /// [`LockOptions::retry_delay`] for how it combines with release
    /// announcements).
    /// The default is [`crate::DEFAULT_RETRY_DELAY`]. See [`LockOptions::retry_delay`].
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.options = self.options.retry_delay(delay);
        self
    }

    /// How long [`Redlock::lock`] keeps trying. The default is
    /// [`crate::DEFAULT_WAIT`]. See [`LockOptions::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options = self.options.wait(wait);
        self
    }

    /// Stop [`Redlock::lock`] after this many attempts even if the wait has
    /// not run out. The default is no limit besides the wait.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options = self.options.max_attempts(attempts);
        self
    }

    /// Minimum validity an acquisition must leave. The default is
    /// [`crate::DEFAULT_MIN_VALIDITY`]. See [`LockOptions::min_validity`].
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.options = self.options.min_validity(min);
        self
    }

    /// Whether the shared watchdog renews held locks. On by default. See
    /// [`LockOptions::auto_renew`].
    pub fn auto_renew(mut self, on: bool) -> Self {
        self.options = self.options.auto_renew(on);
        self
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
        if self.nodes.is_empty() {
            return Err(Error::Config("no nodes given".into()));
        }
        for (what, value) in [
            ("node timeout", self.node_timeout),
            ("connect timeout", self.connect_timeout),
        ] {
            if value.is_zero() || value > MAX_TTL {
                return Err(Error::Config(format!(
                    "{what} must be greater than zero and at most {MAX_TTL:?}, got {value:?}"
                )));
            }
        }
        if self.drift_fixed > MAX_TTL {
            return Err(Error::Config(format!(
                "fixed drift must be at most {MAX_TTL:?}, got {:?}",
                self.drift_fixed
            )));
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(Error::Config(format!(
                "drift factor must be in [0, 1), got {}",
                self.drift_factor
            )));
        }
        self.options.validate()?;
        if let Some(ack) = &self.replica_ack {
            ack.validate(self.node_timeout)?;
        }
        let tasks = Arc::new(Tasks::default());
        let nodes = self
            .nodes
            .into_iter()
            .map(|spec| {
                let client = match spec {
                    NodeSpec::Client(client) => client,
                    NodeSpec::Url(url) if url.starts_with("rediss://") && !cfg!(feature = "tls") => {
                        return Err(Error::Config(format!(
                            "node {}: rediss:// needs the `tls` feature of quorumlock",
                            redact_url(&url)
                        )));
                    }
                    NodeSpec::Url(url) => redis::Client::open(url.as_str())
                        .map_err(|e| Error::Config(format!("bad node URL {}: {e}", redact_url(&url))))?,
                };
                if !client.get_connection_info().addr().is_supported() {
                    return Err(Error::Config(format!(
                        "node {} needs a transport this build lacks (rediss:// needs the `tls` feature)",
                        client.get_connection_info().addr()
                    )));
                }
                Ok(Node::new(client, self.connect_timeout, Arc::clone(&tasks))
                    .with_replica_ack(self.replica_ack)
                    .with_batching(self.batching))
            })
            .collect::<Result<Vec<_>>>()?;
        if nodes.len() % 2 == 0 {
            tracing::warn!(
                nodes = nodes.len(),
                "even number of nodes: tolerates no more failures than one node fewer"
            );
        }
        let config = Config {
            nodes: nodes.into(),
            node_timeout: self.node_timeout,
            drift_factor: self.drift_factor,
            drift_fixed: self.drift_fixed,
            heal: self.heal,
            watchdog: Watchdog::default(),
            handoff: Handoff::default(),
            holders: Holders::default(),
            tasks,
        };
        Ok(Redlock::from_config(Arc::new(config), self.options))
    }
}

/// A node URL fit to print: any password replaced by `***`
/// (`redis://user:***@host:6379/0`). Use it wherever a node URL is shown
/// (logs, errors, status output); quorumlock's own messages and `Debug`
/// output never contain a password.
///
/// # Examples
///
/// ```
/// assert_eq!(quorumlock::redact_url("redis://app:s3cret@10.0.0.1:6379/2"), "redis://app:***@10.0.0.1:6379/2");
/// assert_eq!(quorumlock::redact_url("redis://10.0.0.1:6379"), "redis://10.0.0.1:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme) = url.find("://") else {
        // Not a URL: it cannot be told which part is secret.
        return "***".to_owned();
    };
    let authority_end = url[scheme + 3..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme + 3 + i);
    let shown = match url[..authority_end].rfind('@') {
        None => url.to_owned(),
        Some(at) => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &userinfo[..colon], &url[at..]),
                // `redis://secret@host`: redis-rs reads a lone user part as
                // the user name, but people write passwords there too.
                None if !userinfo.is_empty() => format!("{}***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
    };
    redact_query(&shown)
}

/// `unix:///run/redis.sock?db=1&pass=secret`: the password of a socket URL
/// travels in the query.
fn redact_query(url: &str) -> String {
    let Some(start) = url.find('?') else {
        return url.to_owned();
    };
    let (base, query) = url.split_at(start + 1);
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if matches!(name, "pass" | "password") => format!("{name}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{base}{}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact_url("rediss://u:p@ss:w@rd@h:1"), "rediss://u:***@h:1");
        assert_eq!(redact_url("redis://secret@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact_url("redis://h:6379/0?x=a@b"), "redis://h:6379/0?x=a@b");
        assert_eq!(redact_url("unix:///run/redis.sock"), "unix:///run/redis.sock");
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=1&pass=secret"),
            "unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(redact_url("secret@host:6379"), "***");
    }

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
}
