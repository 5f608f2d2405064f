//! The seam between the client and the stores a lock can live in: N
//! independent Redis masters (Redlock), an etcd cluster, a ZooKeeper
//! ensemble, behind one API. Every switch over the stores is here.
//!
//! ```text
//! Redlock (client, shutdown, inspect)           Guard (lock core)
//!        │  try_lock / lock / unlock / shutdown    │ extend / release / drop
//!        ▼                                         ▼
//!     Backend ── Redlock:   redlock::{attempt, waiter, hold, renew} ─ quorum ─ node ─ wire
//!             ├─ Etcd:      etcd::{mutex, keepalive}    ─┐ cluster::{ClusterHold, shutdown}
//!             └─ ZooKeeper: zookeeper::{mutex, heartbeat} ┘
//!
//! the core every store is written against: lock::{hold::Hold,
//! renewal::Round, state::Held, lease::Lease, holders::Holders}
//! ```
//!
//! An enum here, a trait at the guard: a lock call matches once and each
//! store keeps state of its own shape; a guard calls its store's `Hold`
//! without knowing which store it is.

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod cluster;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
pub(crate) mod node_kind;
pub mod probe;
pub(crate) mod redlock;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::backend::node_kind::NodeKind;
use crate::backend::redlock::attempt::attempt;
use crate::backend::redlock::kind::Kind;
use crate::backend::redlock::masters::Masters;
use crate::backend::redlock::waiter;
use crate::config::Timing;
use crate::error::{Error, Result, Setting};
use crate::lock::guard::Guard;
use crate::lock::inspection::{Inspection, UnlockReport};
use crate::lock::resources::Resources;
use crate::metrics::{self, Call};
use crate::options::LockOptions;
#[cfg(not(all(feature = "etcd", feature = "zookeeper")))]
use crate::redact::redact_url;
use crate::tasks::{BackgroundWork, Tasks};

/// What a shutdown did: each lock still held, given back, with whether its
/// store confirmed that; then the background work still running at the
/// deadline, by kind.
pub(crate) type Released = (Vec<(Resources, bool)>, Vec<(BackgroundWork, usize)>);

/// The store a client's locks live in, chosen by the node URLs.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    /// N independent Redis nodes (Redlock): `redis://`, `rediss://`, `unix://`.
    Redlock(Arc<Masters>),
    /// One etcd cluster, whose Raft quorum replaces the Redlock majority:
    /// `etcd://`, `etcds://`.
    #[cfg(feature = "etcd")]
    Etcd(Arc<etcd::Cluster>),
    /// One ZooKeeper ensemble, whose ZAB quorum replaces the Redlock
    /// majority: `zk://`.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Arc<zookeeper::Ensemble>),
}

impl Backend {
    /// One attempt; [`Error::Held`] when another owner holds the lock.
    /// Records the call's outcome and duration ([`metrics::lock_call`]).
    pub(crate) fn try_lock<'a>(
        &'a self,
        options: &'a LockOptions,
        resources: &'a Resources,
        ttl: Duration,
    ) -> impl Future<Output = Result<Guard>> + Send + 'a {
        self.acquire(Call::TryLock, options, resources, ttl)
    }

    /// Takes the lock, waiting as [`LockOptions::wait`] allows. Records the
    /// call's outcome and duration ([`metrics::lock_call`]).
    pub(crate) fn lock<'a>(
        &'a self,
        options: &'a LockOptions,
        resources: &'a Resources,
        ttl: Duration,
    ) -> impl Future<Output = Result<Guard>> + Send + 'a {
        self.acquire(Call::Lock, options, resources, ttl)
    }

    /// `call` on the client's store, traced and counted (the future the
    /// two calls return as it is: a wrapper's state machine would deepen
    /// every caller's future type).
    async fn acquire(
        &self,
        call: Call,
        options: &LockOptions,
        resources: &Resources,
        ttl: Duration,
    ) -> Result<Guard> {
        let started = Instant::now();
        let span = acquire_span(call, resources);
        let wait = matches!(call, Call::Lock);
        let result = async {
            match self {
                Backend::Redlock(masters) if wait => waiter::lock(masters, options, resources, ttl).await,
                Backend::Redlock(masters) => {
                    let kind = Kind::new(options.fenced, None);
                    let result = attempt(masters, options, resources, ttl, kind).await;
                    metrics::attempt(started.elapsed(), &result);
                    result.map(|guard| guard.with_attempts(1))
                }
                #[cfg(feature = "etcd")]
                Backend::Etcd(store) => cluster::in_line::lock(store, options, resources, ttl, wait).await,
                #[cfg(feature = "zookeeper")]
                Backend::ZooKeeper(store) => {
                    cluster::in_line::lock(store, options, resources, ttl, wait).await
                }
            }
        }
        .instrument(span.clone())
        .await;
        finish(call, started, &span, result)
    }

    /// Independent members the lock is taken on: Redis nodes, or 1 for an
    /// etcd cluster or a ZooKeeper ensemble (its members' quorum is inside it).
    pub(crate) fn members(&self) -> usize {
        match self {
            Backend::Redlock(masters) => masters.quorum.len(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => 1,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => 1,
        }
    }

    /// Members that must agree.
    pub(crate) fn majority(&self) -> usize {
        match self {
            Backend::Redlock(masters) => masters.quorum.majority(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(_) => 1,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(_) => 1,
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Backend::Redlock(masters) => masters.is_closed(),
            #[cfg(feature = "etcd")]
            Backend::Etcd(store) => store.state.is_closed(),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(store) => store.state.is_closed(),
        }
    }

    /// What each member holds for `resource` ([`crate::Redlock::inspect`]).
    pub(crate) async fn inspect(&self, resource: String) -> Inspection {
        match self {
            Backend::Redlock(masters) => redlock::inspect::inspect(&masters.quorum, resource).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(store) => cluster::inspect::inspect(&**store, resource).await,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(store) => cluster::inspect::inspect(&**store, resource).await,
        }
    }

    /// Clears `resource` where it holds `token`, or whoever holds it
    /// without one ([`crate::Redlock::unlock`], `force_unlock`).
    pub(crate) async fn unlock(&self, resource: String, token: Option<&str>) -> UnlockReport {
        match self {
            Backend::Redlock(masters) => redlock::inspect::unlock(&masters.quorum, resource, token).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(store) => cluster::inspect::unlock(&**store, resource, token).await,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(store) => cluster::inspect::unlock(&**store, resource, token).await,
        }
    }

    /// Ends the client ([`crate::Redlock::shutdown`]): no new lock, every
    /// held lock given back by `deadline`, then the background work still
    /// running at the deadline.
    pub(crate) async fn shutdown(&self, deadline: Instant) -> Released {
        match self {
            Backend::Redlock(masters) => masters.shutdown(deadline).await,
            #[cfg(feature = "etcd")]
            Backend::Etcd(store) => cluster::shutdown(store, deadline).await,
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(store) => cluster::shutdown(store, deadline).await,
        }
    }

    /// The Redis nodes, for what only Redlock offers (`what` names it in
    /// the error otherwise).
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(unused_variables))]
    pub(crate) fn redlock(&self, what: &str) -> Result<&Arc<Masters>> {
        match self {
            Backend::Redlock(masters) => Ok(masters),
            #[cfg(feature = "etcd")]
            Backend::Etcd(store) => Err(Error::config(
                Setting::Nodes,
                format!(
                    "{what} needs Redis nodes; {} is an etcd cluster",
                    store.url.redacted()
                ),
            )),
            #[cfg(feature = "zookeeper")]
            Backend::ZooKeeper(store) => Err(Error::config(
                Setting::Nodes,
                format!(
                    "{what} needs Redis nodes; {} is a ZooKeeper ensemble",
                    store.url.redacted()
                ),
            )),
        }
    }
}

/// The span of a lock call: `quorumlock.acquire`, with the call and the
/// resources; each attempt records the nodes that confirmed, refused and
/// failed (on Redis), and the call its outcome, attempts, wait and validity.
fn acquire_span(call: Call, resources: &Resources) -> Span {
    tracing::debug_span!(
        "quorumlock.acquire",
        call = call.label(),
        resources = ?resources.names(),
        ok = Empty,
        refused = Empty,
        failed = Empty,
        outcome = Empty,
        attempts = Empty,
        waited_ms = Empty,
        validity_ms = Empty,
    )
}

/// Records a lock call that began at `started` (in `span` and the
/// metrics), and gives its guard the time it waited.
fn finish(call: Call, started: Instant, span: &Span, result: Result<Guard>) -> Result<Guard> {
    let waited = started.elapsed();
    metrics::lock_call(call, waited, &result);
    span.record("outcome", metrics::outcome(&result));
    span.record("waited_ms", waited.as_millis() as u64);
    let guard = result?.with_waited(waited);
    span.record("attempts", guard.acquisition().attempts());
    let validity = guard.valid_until().saturating_duration_since(Instant::now());
    span.record("validity_ms", validity.as_millis() as u64);
    Ok(guard)
}

/// Refuses the settings of Redis nodes only, for a cluster's client: `set`
/// says whether `replica_ack`, `heal` and `batching` were set. Refused
/// rather than ignored, so that nobody counts on what the store does not do.
pub(crate) fn refuse_redis_settings(set: [bool; 3]) -> Result<()> {
    let settings = [
        (Setting::ReplicaAck, "replica acknowledgement"),
        (Setting::Heal, "healing of keys a node lost"),
        (Setting::Batching, "batching of requests to a node"),
    ];
    match set.into_iter().zip(settings).find(|(set, _)| *set) {
        Some((_, (setting, what))) => Err(Error::config(
            setting,
            format!(
                "{what} is for Redis nodes; etcd and ZooKeeper keep a lock in their own replicated \
                 log, acknowledged once a majority of their members has it"
            ),
        )),
        None => Ok(()),
    }
}

/// The store other than Redis that the node URLs name: a cluster's one URL
/// (`etcd://`, `etcds://`, `zk://`), alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClusterUrl {
    Etcd(String),
    ZooKeeper(String),
}

/// The cluster URL that the node URLs name, if they name one: a single
/// `etcd://`, `etcds://` or `zk://` URL, alone. Lists split at commas (the
/// CLI's `--nodes`, `QUORUMLOCK_NODES`) split a cluster URL's members
/// apart, so scheme-less items after it are joined back to it. `nodes`
/// counts every node given, `redis::Client`s included.
pub(crate) fn cluster_url(urls: &[&str], nodes: usize) -> Result<Option<ClusterUrl>> {
    let kind = |url: &str| match NodeKind::of(url) {
        NodeKind::Etcd => Some(ClusterUrl::Etcd as fn(String) -> ClusterUrl),
        NodeKind::ZooKeeper => Some(ClusterUrl::ZooKeeper as fn(String) -> ClusterUrl),
        _ => None,
    };
    if !urls.iter().any(|url| kind(url).is_some()) {
        return Ok(None);
    }
    let continued = urls.len() == nodes
        && kind(urls[0]).is_some()
        && urls[1..].iter().all(|member| !member.contains("://"));
    let Some(make) = kind(urls[0]).filter(|_| continued) else {
        return Err(Error::config(
            Setting::Nodes,
            "an etcd or ZooKeeper URL names a whole cluster and cannot be mixed with other nodes: \
             give its members in one URL (etcd://h1:2379,h2:2379,h3:2379, zk://h1:2181,h2:2181,h3:2181)",
        ));
    };
    Ok(Some(make(urls.join(","))))
}

/// The backend of a cluster URL among the node URLs, if there is one (see
/// [`cluster_url`]).
pub(crate) fn cluster(
    urls: &[&str],
    nodes: usize,
    timing: Timing,
    tasks: &Arc<Tasks>,
) -> Result<Option<Backend>> {
    match cluster_url(urls, nodes)? {
        None => Ok(None),
        Some(ClusterUrl::Etcd(url)) => open_etcd(&url, timing, tasks).map(Some),
        Some(ClusterUrl::ZooKeeper(url)) => open_zookeeper(&url, timing, tasks).map(Some),
    }
}

#[cfg(feature = "etcd")]
fn open_etcd(url: &str, timing: Timing, tasks: &Arc<Tasks>) -> Result<Backend> {
    let url = etcd::EtcdUrl::parse(url)?;
    url.check_files()?;
    let store = etcd::Cluster::new(url, timing, Arc::clone(tasks));
    Ok(Backend::Etcd(Arc::new(store)))
}

#[cfg(feature = "zookeeper")]
fn open_zookeeper(url: &str, timing: Timing, tasks: &Arc<Tasks>) -> Result<Backend> {
    let url = zookeeper::ZkUrl::parse(url)?;
    let store = zookeeper::Ensemble::new(url, timing, Arc::clone(tasks));
    Ok(Backend::ZooKeeper(Arc::new(store)))
}

/// A backend this build lacks: which feature it needs.
#[cfg(not(all(feature = "etcd", feature = "zookeeper")))]
fn missing_feature(url: &str, feature: &str) -> Error {
    Error::config(
        Setting::Nodes,
        format!(
            "{}: this URL needs the `{feature}` feature of quorumlock",
            redact_url(url)
        ),
    )
}

#[cfg(not(feature = "etcd"))]
fn open_etcd(url: &str, _timing: Timing, _tasks: &Arc<Tasks>) -> Result<Backend> {
    Err(missing_feature(url, "etcd"))
}

#[cfg(not(feature = "zookeeper"))]
fn open_zookeeper(url: &str, _timing: Timing, _tasks: &Arc<Tasks>) -> Result<Backend> {
    Err(missing_feature(url, "zookeeper"))
}
