//! What `quorumlock check` asks an etcd cluster: each member's state, the
//! cluster's size, and whether the URL's user may take a lock.

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, PutOptions, Txn, TxnOp};

use super::EtcdUrl;
use crate::lock::resources::RESERVED_PREFIX;
use crate::random;

/// One member given in the URL, as it answered.
#[derive(Clone, Debug, Default)]
pub struct MemberProbe {
    /// `host:port`, as given.
    pub endpoint: String,
    /// The time the status request took.
    pub latency: Option<Duration>,
    /// The etcd version it runs.
    pub version: String,
    /// It is the leader.
    pub leader: bool,
    /// It knows a leader (a member cut off from the others knows none).
    pub has_leader: bool,
    /// Raft term, to compare between members.
    pub raft_term: u64,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// What the cluster said.
#[derive(Clone, Debug)]
pub struct EtcdProbe {
    /// The URL, without its password.
    pub url: String,
    /// Each member given in the URL, in its order.
    pub members: Vec<MemberProbe>,
    /// Members the cluster has (from its member list), when it answered.
    pub cluster_size: Option<usize>,
    /// A lease granted, a key put under it in a transaction, and the lease
    /// revoked, as the URL's user: what every lock does.
    pub lock_operations: Result<(), String>,
}

/// Probes the cluster of `url`, each request bounded by `timeout`.
///
/// # Errors
///
/// A message for a URL that does not parse (without its password).
pub async fn probe(url: &str, timeout: Duration) -> Result<EtcdProbe, String> {
    let url = EtcdUrl::parse(url).map_err(|e| e.to_string())?;
    let members = futures::future::join_all(url.members.iter().map(|m| member(&url, m, timeout))).await;
    let whole = connect(&url, url.endpoints(), timeout).await;
    let (cluster_size, lock_operations) = match whole {
        Ok(mut client) => {
            let size = tokio::time::timeout(timeout, client.member_list())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|list| list.members().len());
            (size, lock_operations(&mut client, timeout).await)
        }
        Err(error) => (None, Err(error)),
    };
    Ok(EtcdProbe {
        url: url.redacted(),
        members,
        cluster_size,
        lock_operations,
    })
}

async fn connect(url: &EtcdUrl, endpoints: Vec<String>, timeout: Duration) -> Result<Client, String> {
    let mut options = ConnectOptions::new().with_connect_timeout(timeout);
    if let Some((name, password)) = &url.user {
        options = options.with_user(name, password);
    }
    let options = super::with_tls(options, url).map_err(|e| e.to_string())?;
    Client::connect(endpoints, Some(options))
        .await
        .map_err(|e| e.to_string())
}

async fn member(url: &EtcdUrl, endpoint: &str, timeout: Duration) -> MemberProbe {
    let mut probe = MemberProbe {
        endpoint: endpoint.to_owned(),
        ..MemberProbe::default()
    };
    let scheme = if url.tls { "https" } else { "http" };
    let started = Instant::now();
    let status = match connect(url, vec![format!("{scheme}://{endpoint}")], timeout).await {
        Ok(mut client) => match tokio::time::timeout(timeout, client.status()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => return with_error(probe, e.to_string()),
            Err(_) => return with_error(probe, format!("no reply within {timeout:?}")),
        },
        Err(e) => return with_error(probe, e),
    };
    probe.latency = Some(started.elapsed());
    probe.version = status.version().to_owned();
    probe.has_leader = status.leader() != 0;
    probe.leader = status.header().is_some_and(|h| h.member_id() == status.leader());
    probe.raft_term = status.raft_term();
    probe
}

fn with_error(mut probe: MemberProbe, error: String) -> MemberProbe {
    probe.error = Some(error);
    probe
}

async fn lock_operations(client: &mut Client, timeout: Duration) -> Result<(), String> {
    let bounded = |what: &'static str| move |_| format!("{what}: no reply within {timeout:?}");
    let grant = tokio::time::timeout(timeout, client.lease_grant(5, None))
        .await
        .map_err(bounded("lease grant"))?
        .map_err(|e| format!("lease grant: {e}"))?;
    let key = format!("{RESERVED_PREFIX}check:{}", random::token());
    let put = TxnOp::put(key, "", Some(PutOptions::new().with_lease(grant.id())));
    let txn = tokio::time::timeout(timeout, client.txn(Txn::new().and_then([put])))
        .await
        .map_err(bounded("transaction"))?
        .map_err(|e| format!("transaction: {e}"));
    let revoke = tokio::time::timeout(timeout, client.lease_revoke(grant.id()))
        .await
        .map_err(bounded("lease revoke"))?
        .map_err(|e| format!("lease revoke: {e}"));
    txn?;
    revoke.map(|_| ())
}
