//! The etcd backend: locks on one etcd cluster, as etcd's own clientv3
//! `concurrency.Mutex` (and `etcdctl lock`) takes them, so that a fleet can
//! mix quorumlock with them on the same names.
//!
//! - A lock of resource `r` is a key `<prefix>r/<lease id in hex>` created
//!   in a transaction, attached to a lease with the lock's ttl; the key with
//!   the lowest create revision under `<prefix>r/` holds the lock, the
//!   others wait in that order, each watching only the key just before its
//!   own (no polling, no herd).
//! - One keep-alive task per client renews every held lease ([`keepalive`]);
//!   the validity runs from the instant a keep-alive was *sent*, so the loss
//!   signal fires before the cluster can expire the lease.
//! - The fencing token is the revision at which the lock was seen ours: the
//!   key's create revision when the lock was free, the revision of the read
//!   that confirmed it after a wait. Either is above every revision at which
//!   an earlier holder saw the lock its own, because the deletion of that
//!   holder's key came after it and before our read.
//!
//! The Raft quorum inside the cluster replaces the Redlock majority: a
//! write counts once a majority of members has it, and a new leader has
//! every acknowledged write, so a member that dies or restarts loses no
//! lock. docs/how-it-works.md ("The etcd backend") has the recipe and why
//! it is safe, docs/design.md the layer map and docs/safety.md the
//! guarantees.

pub(crate) mod hold;
pub(crate) mod inspect;
pub(crate) mod keepalive;
mod keeper;
mod lease;
mod mutex;
pub(crate) mod probe;
mod url;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::sync::OnceCell;
use tokio::time::Instant;

pub(crate) use lease::Keys;
pub(crate) use url::EtcdUrl;

use super::cluster::ClientState;
use crate::config::Timing;
use crate::config::etcd::{ETCD_MIN_REQUEST_TIMEOUT, ETCD_PING_EVERY};
use crate::error::{Error, NodeErrorKind, Result, Setting, StoreFailure};
use crate::lock::lease::{Lease, TtlUnit};
use crate::tasks::Tasks;

/// One etcd cluster and what every lock of a client on it shares: the
/// connection (opened by the first request, inside the runtime that sends
/// it), the keep-alive task, the registry of held locks for a shutdown.
pub(crate) struct Cluster {
    pub(crate) url: EtcdUrl,
    client: OnceCell<Client>,
    /// What every lock of the client shares: timing, tasks, renewal.
    pub(crate) state: ClientState<Keys, Arc<keepalive::Entry>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &self.url)
            .field("request_timeout", &self.state.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    pub(crate) fn new(url: EtcdUrl, timing: Timing, tasks: Arc<Tasks>) -> Cluster {
        Cluster {
            url,
            client: OnceCell::new(),
            state: ClientState::new(timing, ETCD_MIN_REQUEST_TIMEOUT, LEASE_SECONDS, tasks),
        }
    }

    /// The connection, opened on first use. The etcd client balances over
    /// the members given and connects lazily, so this fails only for
    /// settings it rejects.
    pub(crate) async fn client(&self) -> Result<Client> {
        let client = self
            .client
            .get_or_try_init(|| async {
                let mut options = ConnectOptions::new()
                    .with_connect_timeout(self.state.connect_timeout)
                    // A member cut off from the leader refuses requests
                    // instead of serving what it last knew.
                    .with_require_leader(true)
                    // A member that stops answering (paused, cut off) is
                    // dropped from the balancer once a ping goes unanswered,
                    // instead of taking every other request into its hole.
                    .with_keep_alive(ETCD_PING_EVERY, self.state.request_timeout)
                    .with_keep_alive_while_idle(true);
                if let Some((name, password)) = &self.url.user {
                    options = options.with_user(name, password);
                }
                options = with_tls(options, &self.url)?;
                Client::connect(self.url.endpoints(), Some(options))
                    .await
                    .map_err(|e| self.unreachable(NodeErrorKind::Etcd(StoreFailure::caused_by("connect", e))))
            })
            .await?;
        Ok(client.clone())
    }

    /// `request`, bounded by the request timeout; any failure as
    /// [`Error::Unreachable`].
    pub(crate) async fn call<T>(
        &self,
        request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        self.call_by(Instant::now() + self.state.request_timeout, request)
            .await
    }

    /// `request`, bounded by `deadline`.
    pub(crate) async fn call_by<T>(
        &self,
        deadline: Instant,
        request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout_at(deadline, request).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(self.unreachable(NodeErrorKind::Etcd(StoreFailure::caused_by("request", e)))),
            Err(_) => Err(self.unreachable(NodeErrorKind::Timeout(self.state.request_timeout))),
        }
    }

    /// The cluster failed: one member of one in the error's terms.
    pub(crate) fn unreachable(&self, kind: NodeErrorKind) -> Error {
        Error::unreachable_store(self.url.redacted(), kind)
    }

    /// The key of our lock on `resource` under `lease`, named as
    /// `concurrency.Mutex` names it.
    pub(crate) fn key(&self, resource: &str, lease: i64) -> String {
        format!("{}{lease:x}", self.resource_prefix(resource))
    }

    /// Where every contender's key for `resource` lives.
    pub(crate) fn resource_prefix(&self, resource: &str) -> String {
        format!("{}{resource}/", self.url.prefix)
    }

    /// What a lease granted (or kept alive) with `ttl` by a request sent at
    /// `sent` makes ours.
    pub(crate) fn lease(&self, sent: Instant, ttl: Duration) -> Lease {
        self.state.lease(sent, ttl, ttl)
    }
}

/// An etcd lease counts whole seconds; a lock lasts at least as long as
/// asked.
const LEASE_SECONDS: TtlUnit = TtlUnit {
    unit: Duration::from_secs(1),
    round_up: true,
};

/// `etcds://` trusts the system's root certificates, or the URL's `ca`;
/// with `cert` and `key` it shows that client certificate.
#[cfg(feature = "tls")]
pub(crate) fn with_tls(options: ConnectOptions, url: &EtcdUrl) -> Result<ConnectOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    if !url.tls {
        return Ok(options);
    }
    let read = |path: &str| {
        std::fs::read(path).map_err(|e| {
            Error::config(
                Setting::Nodes,
                format!("{}: cannot read {path}: {e}", url.redacted()),
            )
        })
    };
    let mut tls = match &url.ca {
        Some(ca) => TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)?)),
        None => TlsOptions::new().with_native_roots(),
    };
    if let Some((cert, key)) = &url.identity {
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(options.with_tls(tls))
}

#[cfg(not(feature = "tls"))]
pub(crate) fn with_tls(options: ConnectOptions, url: &EtcdUrl) -> Result<ConnectOptions> {
    if url.tls {
        return Err(Error::config(
            Setting::Nodes,
            format!(
                "{}: etcds:// needs the `tls` feature of quorumlock",
                url.redacted()
            ),
        ));
    }
    Ok(options)
}
