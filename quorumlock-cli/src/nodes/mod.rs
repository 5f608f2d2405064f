//! Where the nodes come from (`--nodes`, `--nodes-file`, `QUORUMLOCK_NODES`)
//! and how their URLs, which may hold passwords, are kept out of sight.
//!
//! A password in a node URL must never be shown: every URL printed goes
//! through [`quorumlock::redact_url`], the command run by `quorumlock run`
//! does not inherit the variables listed in [`SECRET_ENV`], and the two
//! sources that `ps` does not show (the environment and a file) are offered
//! next to `--nodes`, whose value every user of the machine can read in
//! `ps` (`/proc/PID/cmdline`) for as long as quorumlock runs.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quorumlock::{Redlock, RedlockBuilder, redact_url};

use crate::duration;
use crate::tls::{self, TlsCa};
#[cfg(feature = "etcd")]
pub(crate) use multi_host::is_etcd;
pub(crate) use multi_host::{is_redis_cluster, is_sentinel, is_zookeeper};
use multi_host::{missing_feature, split};

mod multi_host;

/// The variable holding the nodes when neither `--nodes` nor `--nodes-file`
/// is given.
pub(crate) const NODES_ENV: &str = "QUORUMLOCK_NODES";

/// The variables of ours that may hold a password, removed from the
/// environment of the command (and of the guardian): the command has no use
/// for them, and whatever it runs could log, dump or pass them on.
pub(crate) const SECRET_ENV: &[&str] = &[NODES_ENV];

/// Permission bits that let a group or others read a file; a nodes file
/// with a password and any of them is refused, as ssh refuses such a key.
const SHARED_READ: u32 = 0o044;

/// The nodes to use: `--nodes`, `--nodes-file` or `QUORUMLOCK_NODES`.
#[derive(clap::Args, Clone)]
pub(crate) struct Nodes {
    /// Redis nodes, comma separated: redis://[user:password@]host:port[/db], rediss:// for TLS;
    /// a Redis Cluster as one node, its servers comma separated in one URL:
    /// redis+cluster://[user:password@]h1:7000,h2:7001, rediss+cluster:// for TLS; a
    /// Sentinel-managed master as one node, its sentinels comma separated in one URL:
    /// redis+sentinel://[user:password@]s1:26379,s2:26379/mastername[/db] (the credentials and
    /// db are the master's), rediss+sentinel:// for TLS; or one etcd cluster, its members comma separated in one URL:
    /// etcd://[user:password@]h1:2379,h2:2379,h3:2379[/prefix], etcds:// for TLS (a build with
    /// the `etcd` feature); or one ZooKeeper ensemble, its servers comma separated in one URL:
    /// zk://[user:password@]h1:2181,h2:2181,h3:2181[/chroot][?session_timeout=10s] (a build with
    /// the `zookeeper` feature) [default: $QUORUMLOCK_NODES]. Every user of the machine sees
    /// --nodes in `ps` while quorumlock runs: give URLs with a password through QUORUMLOCK_NODES
    /// or --nodes-file instead
    #[arg(
        long = "nodes",
        value_delimiter = ',',
        value_name = "URL,...",
        conflicts_with = "nodes_file"
    )]
    urls: Vec<String>,
    /// Read the node URLs from this file: one per line or comma separated, `#` starts a comment
    /// line. A file holding a password must not be readable by group or others (chmod 600)
    #[arg(long, value_name = "PATH")]
    nodes_file: Option<PathBuf>,
    /// Trust this CA certificate (PEM) for rediss:// nodes, instead of the public roots
    /// (needs a build with the `tls` feature)
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Time each node has to answer one request.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration::parse,
        default_value = "100ms",
        env = "QUORUMLOCK_NODE_TIMEOUT"
    )]
    pub(crate) node_timeout: Duration,
}

/// Never shows a password (clap's derive wants `Debug`).
impl fmt::Debug for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nodes")
            .field(
                "urls",
                &self.urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>(),
            )
            .field("nodes_file", &self.nodes_file)
            .field("tls_ca", &self.tls_ca)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

/// The node URLs and how to connect to them, checked for use.
pub(crate) struct Resolved {
    pub(crate) urls: Vec<String>,
    ca: Option<TlsCa>,
    node_timeout: Duration,
}

impl Nodes {
    /// A client over these nodes, with the library's defaults for the rest;
    /// the error is a message for the user (a usage error).
    pub(crate) fn client(&self) -> Result<Redlock, String> {
        self.resolve()
            .and_then(|nodes| nodes.builder())
            .and_then(|builder| builder.build().map_err(|e| e.to_string()))
    }

    /// The node URLs from the first source given (`--nodes`, then
    /// `--nodes-file`, then `QUORUMLOCK_NODES`), or the usage error to print,
    /// which never contains a password. An empty list is not an error here
    /// (`demo` then starts its own nodes).
    pub(crate) fn resolve(&self) -> Result<Resolved, String> {
        let (urls, source) = if !self.urls.is_empty() {
            (split(&self.urls.join(",")), "--nodes".to_owned())
        } else if let Some(path) = &self.nodes_file {
            (read_file(path)?, format!("--nodes-file {}", path.display()))
        } else {
            let value = std::env::var_os(NODES_ENV).unwrap_or_default();
            let Some(value) = value.to_str() else {
                return Err(format!("{NODES_ENV} is not valid UTF-8"));
            };
            (split(value), NODES_ENV.to_owned())
        };
        for (i, url) in urls.iter().enumerate() {
            // The library redacts the URLs it names in errors, but only a
            // URL with a scheme has a recognisable password part: a
            // mistyped one is not shown at all.
            if !url.contains("://") {
                return Err(format!(
                    "bad node URL: node {} of {} from {source} is not a URL like \
                     redis://[user:password@]host:port[/db] (host:port items belong to a redis+cluster://, \
                     redis+sentinel://, etcd:// or zk:// URL before them; it is not shown: it may hold \
                     a password)",
                    i + 1,
                    urls.len()
                ));
            }
        }
        if let Some(message) = urls.iter().find_map(|u| missing_feature(u)) {
            return Err(message);
        }
        if source == "--nodes" && urls.iter().any(|u| has_password(u)) {
            crate::say!(
                "quorumlock: warning: --nodes holds a password, which every user of this machine can \
                 read in ps while quorumlock runs; use {NODES_ENV} or --nodes-file instead"
            );
        }
        let ca = self.tls_ca.as_deref().map(tls::read_ca).transpose()?;
        // The library opens a cluster's or a sentinel's servers itself,
        // trusting the public roots only: a private CA would be ignored.
        if ca.is_some()
            && let Some(url) = urls
                .iter()
                .find(|u| u.starts_with("rediss+") && (is_redis_cluster(u) || is_sentinel(u)))
        {
            return Err(format!(
                "--tls-ca applies to rediss:// nodes only, not to {}: its servers are checked \
                 against the public roots",
                redact_url(url)
            ));
        }
        Ok(Resolved {
            urls,
            ca,
            node_timeout: self.node_timeout,
        })
    }
}

impl Resolved {
    /// The usage error for no nodes at all.
    pub(crate) fn require_some(&self) -> Result<(), String> {
        if self.urls.is_empty() {
            return Err(format!(
                "no nodes: give --nodes URL,URL,..., --nodes-file PATH or set {NODES_ENV}"
            ));
        }
        Ok(())
    }

    /// A builder over `urls` (the resolved ones, or the demo's own), each
    /// rediss:// node trusting `--tls-ca` when given.
    pub(crate) fn builder_over(&self, urls: &[String]) -> Result<RedlockBuilder, String> {
        let mut builder = Redlock::builder().node_timeout(self.node_timeout);
        for url in urls {
            builder = match &self.ca {
                Some(ca) if tls::is_tls(url) => builder.client(tls::client(url, ca)?),
                _ => builder.node(url.as_str()),
            };
        }
        Ok(builder)
    }

    /// A builder over the resolved nodes, or the usage error to print.
    pub(crate) fn builder(&self) -> Result<RedlockBuilder, String> {
        self.require_some()?;
        self.builder_over(&self.urls)
    }

    /// A client for one node, for `check`'s own probes.
    pub(crate) fn client(&self, url: &str) -> Result<redis::Client, String> {
        match &self.ca {
            Some(ca) if tls::is_tls(url) => tls::client(url, ca),
            _ => redis::Client::open(url).map_err(|e| format!("bad URL: {e}")),
        }
    }
}

/// Whether `url` holds a password (or a lone user part, which people use
/// for one): redaction changes it.
fn has_password(url: &str) -> bool {
    redact_url(url) != url
}

/// The URLs of a nodes file, refused when it holds a password that a group
/// or others may read. The mode is that of the file a symlink points to; a
/// pipe (`--nodes-file <(vault read ...)`) is private to its user.
fn read_file(path: &Path) -> Result<Vec<String>, String> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--nodes-file {shown}: cannot read it: {e}"))?;
    let urls = split(&text);
    if urls.is_empty() {
        return Err(format!("--nodes-file {shown}: no node URL in it"));
    }
    let mode = std::fs::metadata(path)
        .map_err(|e| format!("--nodes-file {shown}: {e}"))?
        .permissions()
        .mode();
    if mode & SHARED_READ != 0 && urls.iter().any(|u| has_password(u)) {
        return Err(format!(
            "--nodes-file {shown} holds a password and is readable by group or others (mode {:04o}); \
             make it private: chmod 600 {shown}",
            mode & 0o7777
        ));
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--nodes` as clap hands it over: already split at the commas.
    fn given(urls: &[&str]) -> Nodes {
        Nodes {
            urls: urls.iter().map(|&u| u.to_owned()).collect(),
            nodes_file: None,
            tls_ca: None,
            node_timeout: Duration::from_millis(100),
        }
    }

    #[test]
    fn nodes_split_by_clap_are_joined_back_into_one_etcd_url() {
        let resolved = given(&["etcd://a:1", "b:2", "c:3/locks"]).resolve();
        if cfg!(feature = "etcd") {
            assert_eq!(
                resolved.ok().map(|r| r.urls),
                Some(vec!["etcd://a:1,b:2,c:3/locks".to_owned()])
            );
        } else {
            let error = resolved.err().expect("refused without the feature");
            assert!(error.contains("built with the `etcd` feature"), "{error}");
        }
    }

    #[test]
    fn nodes_split_by_clap_are_joined_back_into_redis_members() {
        let resolved = given(&[
            "redis+sentinel://:pw@s1:1",
            "s2:2/mymaster/1",
            "redis://a:1",
            "redis+cluster://b:2",
            "c:3",
        ])
        .resolve();
        assert_eq!(
            resolved.ok().map(|r| r.urls),
            Some(vec![
                "redis+sentinel://:pw@s1:1,s2:2/mymaster/1".to_owned(),
                "redis://a:1".to_owned(),
                "redis+cluster://b:2,c:3".to_owned(),
            ])
        );
        let error = given(&["c:3", "redis+cluster://b:2"])
            .resolve()
            .err()
            .expect("a usage error");
        assert!(
            error.contains("redis+cluster://"),
            "the message names the form: {error}"
        );
        assert!(
            error.contains("redis+sentinel://"),
            "the message names the form: {error}"
        );
    }

    #[test]
    fn a_member_after_a_redis_url_is_still_not_a_url() {
        assert_eq!(split("redis://a:1,b:2"), ["redis://a:1", "b:2"]);
        for stray in [&["redis://a:1", "b:2"][..], &["b:2", "etcd://a:1"]] {
            let error = given(stray).resolve().err().expect("a usage error");
            assert!(error.contains("is not a URL like"), "{error}");
            assert!(!error.contains("b:2"), "the item is not shown: {error}");
        }
    }

    #[test]
    fn an_etcd_password_is_never_shown_without_the_feature() {
        if !cfg!(feature = "etcd") {
            let error = given(&["etcd://u:s3cret@a:1", "b:2"])
                .resolve()
                .err()
                .expect("refused");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }

    #[test]
    fn nodes_split_by_clap_are_joined_back_into_one_zookeeper_url() {
        let resolved = given(&["zk://a:1", "b:2", "c:3/locks?session_timeout=2s"]).resolve();
        if cfg!(feature = "zookeeper") {
            assert_eq!(
                resolved.ok().map(|r| r.urls),
                Some(vec!["zk://a:1,b:2,c:3/locks?session_timeout=2s".to_owned()])
            );
        } else {
            let error = resolved.err().expect("refused without the feature");
            assert!(error.contains("built with the `zookeeper` feature"), "{error}");
            assert!(error.contains("--features zookeeper"), "{error}");
        }
    }

    #[test]
    fn a_server_before_a_zookeeper_url_is_still_not_a_url() {
        let error = given(&["b:2", "zk://a:1"])
            .resolve()
            .err()
            .expect("a usage error");
        assert!(error.contains("is not a URL like"), "{error}");
        assert!(error.contains("zk://"), "the message names the form: {error}");
        assert!(!error.contains("b:2"), "the item is not shown: {error}");
    }

    #[test]
    fn a_zookeeper_password_is_never_shown_without_the_feature() {
        if !cfg!(feature = "zookeeper") {
            let error = given(&["zk://u:s3cret@a:1", "b:2"])
                .resolve()
                .err()
                .expect("refused");
            assert!(error.contains("zk://u:***@"), "{error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }

    #[test]
    fn a_password_or_a_lone_user_part_counts_as_a_secret() {
        assert!(has_password("redis://:pw@h:1"));
        assert!(has_password("redis://u:pw@h:1"));
        assert!(has_password("redis://pw@h:1"));
        assert!(!has_password("redis://h:1/0"));
    }
}
