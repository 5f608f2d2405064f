//! Node URLs: which kind of member each one names.
//!
//! - `redis://`, `rediss://`, `unix://` and the other forms of the redis
//!   crate: one server.
//! - `redis+cluster://[user:password@]host:port[,host:port...][/]`: a Redis
//!   Cluster, reached first through the servers listed (any of its nodes);
//!   `rediss+cluster://` with TLS. A cluster has database 0 only.
//! - `redis+sentinel://[user:password@]host:port[,host:port...]/master[/db]`:
//!   the master that the listed sentinels manage under the name `master`;
//!   `rediss+sentinel://` with TLS. The credentials, the database and TLS
//!   are the master's; the sentinels are asked over the same transport,
//!   without credentials.

use redis::sentinel::SentinelNodeConnectionInfo;
use redis::{Client, ConnectionInfo, TlsMode};

use super::cluster::Cluster;
use super::server::Server;
use super::target::{SentinelMaster, Target};
use super::{Node, Settings};
use crate::backend::node_kind::NodeKind;
use crate::redact::redact_url;

/// The member `url` names.
pub(super) fn member(url: &str, settings: &Settings) -> Result<Node, String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    match NodeKind::of(url) {
        NodeKind::RedisCluster => cluster(url, scheme, rest, settings),
        NodeKind::Sentinel => sentinel(url, scheme, rest, settings),
        _ => Ok(Node::from_client(client(url)?, settings)),
    }
}

/// Whether this build reaches nodes over TLS (`rediss://`).
const TLS_BUILT: bool = cfg!(feature = "tls");

/// A client for a single server's URL, with a message naming what is wrong.
fn client(url: &str) -> Result<Client, String> {
    client_in_build(url, TLS_BUILT)
}

/// [`client`] in a build with TLS or without it (`tls`): without it, a
/// `rediss://` URL is refused with a message naming the feature.
fn client_in_build(url: &str, tls: bool) -> Result<Client, String> {
    if url.starts_with("rediss") && !tls {
        return Err(format!(
            "node {}: rediss:// needs the `tls` feature of quorumlock",
            redact_url(url)
        ));
    }
    let client = Client::open(url).map_err(|e| format!("bad node URL {}: {e}", redact_url(url)))?;
    if !client.get_connection_info().addr().is_supported() {
        return Err(format!(
            "node {} needs a transport this build lacks (rediss:// needs the `tls` feature)",
            client.get_connection_info().addr()
        ));
    }
    Ok(client)
}

/// The parts of a member URL with several hosts.
struct Parts<'a> {
    /// `redis` or `rediss`.
    base: &'a str,
    /// `user:password@`, or empty.
    credentials: &'a str,
    hosts: Vec<&'a str>,
    /// After the first `/`, without it.
    path: &'a str,
}

fn parts<'a>(url: &str, scheme: &'a str, rest: &'a str) -> Result<Parts<'a>, String> {
    let base = scheme.split('+').next().unwrap_or("redis");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (credentials, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.iter().any(|host| host.is_empty()) {
        return Err(format!("node URL {}: an empty host in the list", redact_url(url)));
    }
    Ok(Parts {
        base,
        credentials,
        hosts,
        path,
    })
}

/// A cluster member: its seeds, each opened like a single server's URL.
fn cluster(url: &str, scheme: &str, rest: &str, settings: &Settings) -> Result<Node, String> {
    let parts = parts(url, scheme, rest)?;
    let (database, query) = parts.path.split_once('?').unwrap_or((parts.path, ""));
    if !matches!(database, "" | "0") {
        return Err(format!(
            "node URL {}: a Redis Cluster has database 0 only, got /{database}",
            redact_url(url)
        ));
    }
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let seeds = parts
        .hosts
        .iter()
        .map(|host| {
            let seed = format!("{}://{}{host}/{query}", parts.base, parts.credentials);
            client(&seed).map(|client| client.get_connection_info().clone())
        })
        .collect::<Result<Vec<ConnectionInfo>, String>>()?;
    let name = format!("{scheme}://{}", parts.hosts.join(","));
    Ok(Node::Cluster(Cluster::new(name, seeds, settings)))
}

/// A Sentinel-managed master: the sentinels to ask, the master's name, and
/// the master's credentials, database and transport.
fn sentinel(url: &str, scheme: &str, rest: &str, settings: &Settings) -> Result<Node, String> {
    let parts = parts(url, scheme, rest)?;
    let (path, query) = parts.path.split_once('?').unwrap_or((parts.path, ""));
    let (master, database) = path.split_once('/').unwrap_or((path, ""));
    if master.is_empty() {
        return Err(format!(
            "node URL {}: name the master after the sentinels, as in {scheme}://host:26379/mymaster",
            redact_url(url)
        ));
    }
    let sentinels = parts
        .hosts
        .iter()
        .map(|host| client(&format!("{}://{host}/", parts.base)).map(|c| c.get_connection_info().clone()))
        .collect::<Result<Vec<ConnectionInfo>, String>>()?;
    // The master's settings, read from a URL of the same form on any host.
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let master_url = format!(
        "{}://{}{}/{database}{query}",
        parts.base, parts.credentials, parts.hosts[0]
    );
    let master_info = client(&master_url)?.get_connection_info().clone();
    let mut servers =
        SentinelNodeConnectionInfo::default().set_redis_connection_info(master_info.redis_settings().clone());
    if parts.base == "rediss" {
        servers = servers.set_tls_mode(TlsMode::Secure);
    }
    let target = SentinelMaster::new(sentinels, master.to_owned(), servers)
        .map_err(|e| format!("node URL {}: {e}", redact_url(url)))?;
    let name = format!("{scheme}://{}/{master}", parts.hosts.join(","));
    Ok(Node::Server(Server::new(
        Target::Sentinel(target),
        name,
        settings,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            connect_timeout: std::time::Duration::from_secs(1),
            tasks: std::sync::Arc::default(),
            batching: true,
            replica_ack: None,
            #[cfg(feature = "sim")]
            dialer: None,
        }
    }

    #[test]
    fn each_scheme_names_its_kind_of_member_and_no_password() {
        let cases = [
            ("redis://:pw@127.0.0.1:6379/2", "127.0.0.1:6379/2", false),
            (
                "redis+cluster://u:pw@127.0.0.1:7000,127.0.0.1:7001",
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
                true,
            ),
            (
                "redis+cluster://127.0.0.1:7000/",
                "redis+cluster://127.0.0.1:7000",
                true,
            ),
            (
                "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster",
                "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
                false,
            ),
        ];
        for (url, name, one_slot) in cases {
            let node = member(url, &settings()).unwrap();
            assert_eq!(node.name(), name);
            assert_eq!(node.one_slot(), one_slot, "{url}");
            assert!(!format!("{node:?}").contains("pw"));
        }
    }

    #[test]
    fn a_bad_member_url_says_what_is_wrong() {
        for (url, says) in [
            ("redis+cluster://127.0.0.1:7000/3", "database 0 only"),
            ("redis+cluster://127.0.0.1:7000,,127.0.0.1:7001", "empty host"),
            ("redis+sentinel://127.0.0.1:26379", "name the master"),
            ("redis+sentinel://:secret@127.0.0.1:26379/", "name the master"),
        ] {
            let error = member(url, &settings()).unwrap_err();
            assert!(error.contains(says), "{url}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }

    /// Without the `tls` feature a `rediss://` node is refused, naming the
    /// feature (the builder makes that a `Config` error of the nodes, as
    /// for every bad URL above).
    #[test]
    fn rediss_urls_need_the_tls_feature() {
        let error = client_in_build("rediss://127.0.0.1:6380", false).unwrap_err();
        assert!(error.contains("`tls` feature"), "{error}");
        assert!(client_in_build("redis://127.0.0.1:6380", false).is_ok());
    }
}
