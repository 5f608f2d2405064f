//! The ZooKeeper backend: locks on one ensemble, as the lock recipe of the
//! ZooKeeper documentation (and python's kazoo `Lock`) takes them, so that a
//! fleet can mix quorumlock with kazoo on the same paths.
//!
//! - A lock of resource `r` is an ephemeral sequential node
//!   `<chroot>/r/<token>__lock__<sequence>` in the client's session; the
//!   lowest sequence holds the lock, the others wait in that order, each
//!   watching only the node just before its own (no polling, no herd).
//! - One session per client keeps every lock of it: the heartbeat task
//!   ([`heartbeat`]) renews them all in one round, and the validity runs
//!   from the instant a heartbeat was *sent* for the share of the session
//!   timeout that it vouches for ([`ZK_TRUSTED_SHARE`]), so the loss signal
//!   fires before the ensemble can expire the session.
//! - The fencing token is a zxid, which the ensemble makes monotonic: the
//!   parent node's `pzxid` (the zxid of its last child creation or
//!   deletion) read in the listing that found our node first, the largest
//!   over a multi-resource lock's resources. It is at least the zxid of the
//!   deletion of every earlier holder's node, which came after that holder
//!   read its own token.
//!
//! ZAB, ZooKeeper's atomic broadcast, replaces the Redlock majority: a write
//! counts once a majority of the ensemble has logged it, and an elected
//! leader has every acknowledged write. docs/how-it-works.md ("The
//! ZooKeeper backend") has the recipe and why it is safe, docs/design.md the
//! layer map and docs/safety.md the guarantees.

pub(crate) mod heartbeat;
pub(crate) mod hold;
pub(crate) mod inspect;
mod line;
mod mutex;
mod nodes;
mod url;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Client, SessionState};

pub(crate) use nodes::Nodes;
pub(crate) use url::ZkUrl;

use super::cluster::ClientState;
use crate::config::Timing;
use crate::config::zookeeper::{ZK_MIN_REQUEST_TIMEOUT, ZK_TRUSTED_SHARE};
use crate::error::{Error, NodeErrorKind, Result, Setting, StoreFailure};
use crate::lock::lease::{Lease, TtlUnit};
use crate::tasks::Tasks;

/// The failure of one ZooKeeper request: the client's error, or
/// [`zookeeper_client::Error::Timeout`] when the request timeout ran out.
pub(crate) type ZkResult<T> = std::result::Result<T, zookeeper_client::Error>;

/// One ZooKeeper ensemble and what every lock of a client on it shares: the
/// session (opened by the first request, inside the runtime that sends it,
/// and opened again after it expired), the heartbeat task, the registry of
/// held locks for a shutdown.
pub(crate) struct Ensemble {
    pub(crate) url: ZkUrl,
    pub(crate) session: tokio::sync::Mutex<Option<Client>>,
    /// What every lock of the client shares: timing, tasks, renewal.
    pub(crate) state: ClientState<Nodes, Arc<Nodes>>,
}

impl std::fmt::Debug for Ensemble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ensemble")
            .field("url", &self.url)
            .field("request_timeout", &self.state.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Ensemble {
    pub(crate) fn new(url: ZkUrl, timing: Timing, tasks: Arc<Tasks>) -> Ensemble {
        Ensemble {
            url,
            session: tokio::sync::Mutex::default(),
            state: ClientState::new(timing, ZK_MIN_REQUEST_TIMEOUT, TtlUnit::MILLIS, tasks),
        }
    }

    /// The session, opened on first use and again after it ended (expired,
    /// closed): a lock of the old session is lost with it, and its holder
    /// was told so by the heartbeat.
    pub(crate) async fn client(&self) -> Result<Client> {
        let mut session = self.session.lock().await;
        if let Some(client) = session.as_ref().filter(|c| !ended(c.state())) {
            return Ok(client.clone());
        }
        let mut connector = Client::connector()
            .with_session_timeout(self.url.session_timeout)
            .with_connection_timeout(self.state.connect_timeout);
        if let Some((name, password)) = &self.url.user {
            connector = connector.with_auth("digest", format!("{name}:{password}").as_bytes());
        }
        // The client tries every server for about a session timeout; a
        // caller waits no longer than a connect and a request.
        let bound = self.state.connect_timeout + self.state.request_timeout;
        let client = match tokio::time::timeout(bound, connector.connect(&self.url.connect_string())).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(self.failed(&e)),
            Err(_) => return Err(self.unreachable(NodeErrorKind::Timeout(bound))),
        };
        *session = Some(client.clone());
        Ok(client)
    }

    /// `request`, bounded by the request timeout.
    pub(crate) async fn call<T>(&self, request: impl Future<Output = ZkResult<T>>) -> ZkResult<T> {
        self.call_by(Instant::now() + self.state.request_timeout, request)
            .await
    }

    /// `request`, bounded by `deadline`.
    pub(crate) async fn call_by<T>(
        &self,
        deadline: Instant,
        request: impl Future<Output = ZkResult<T>>,
    ) -> ZkResult<T> {
        tokio::time::timeout_at(deadline, request)
            .await
            .unwrap_or(Err(zookeeper_client::Error::Timeout))
    }

    /// A request failed: the ensemble, as one member, in the error's terms.
    pub(crate) fn failed(&self, error: &zookeeper_client::Error) -> Error {
        let kind = match error {
            zookeeper_client::Error::Timeout => NodeErrorKind::Timeout(self.state.request_timeout),
            other => NodeErrorKind::ZooKeeper(StoreFailure::caused_by("request", other.clone())),
        };
        self.unreachable(kind)
    }

    /// The ensemble failed: one member of one in the error's terms.
    pub(crate) fn unreachable(&self, kind: NodeErrorKind) -> Error {
        Error::unreachable_store(self.url.redacted(), kind)
    }

    /// The znode under which every contender for `resource` creates its
    /// node: `<chroot>/<resource>`.
    pub(crate) fn path(&self, resource: &str) -> Result<String> {
        let path = format!("{}/{resource}", self.url.chroot);
        url::check_path(&path).map_err(|why| {
            Error::config(
                Setting::Resources,
                format!(
                    "resource {resource:?} is no ZooKeeper path under {}: {why}",
                    self.url.redacted()
                ),
            )
        })?;
        Ok(path)
    }

    /// What a request of `client`'s session sent at `sent` and answered
    /// makes ours, for a lock of `ttl`: the trusted share of the session
    /// timeout the ensemble granted, and never more than the ttl.
    pub(crate) fn lease(&self, client: &Client, sent: Instant, ttl: Duration) -> Lease {
        let trusted = client.session_timeout().mul_f64(ZK_TRUSTED_SHARE);
        self.state.lease(sent, ttl, trusted.min(ttl))
    }
}

/// A session in this state serves no request any more.
fn ended(state: SessionState) -> bool {
    matches!(
        state,
        SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
    )
}
