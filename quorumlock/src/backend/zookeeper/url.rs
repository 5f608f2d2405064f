//! `zk://` node URLs: one ZooKeeper ensemble, given by some of its servers.

use std::fmt;
use std::time::Duration;

use crate::backend::cluster::url::{self, Credentials};
use crate::config::zookeeper::ZK_DEFAULT_SESSION_TIMEOUT;
use crate::error::{Error, Result, Setting};

/// A parsed `zk://[user:password@]host:port[,host:port...][/chroot][?session_timeout=D]`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ZkUrl {
    /// `host:port` of each server given (the client moves between them).
    pub(crate) servers: Vec<String>,
    /// Prepended to every lock's path: the lock of resource `r` lives under
    /// `<chroot>/r`. Empty, or starting with `/` and not ending with one.
    pub(crate) chroot: String,
    /// Digest credentials, sent with the session (`addauth digest user:password`).
    pub(crate) user: Option<Credentials>,
    /// The session timeout asked for; the ensemble answers the one it grants.
    pub(crate) session_timeout: Duration,
}

/// Never shows the password.
impl fmt::Debug for ZkUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl ZkUrl {
    /// Parses `url`, or says what is wrong with it (the message never
    /// contains the password).
    pub(crate) fn parse(url: &str) -> Result<ZkUrl> {
        let bad = |why: &str| {
            Error::config(
                Setting::Nodes,
                format!("bad ZooKeeper URL {}: {why}", crate::redact::redact_url(url)),
            )
        };
        let rest = match url.split_once("://") {
            Some(("zk", rest)) => rest,
            _ => return Err(bad("expected zk://")),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let session_timeout = session_timeout(query).map_err(|why| bad(&why))?;
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let (user, servers) = url::authority(authority, "server", 2181).map_err(|why| bad(&why))?;
        let chroot = path.trim_end_matches('/').to_owned();
        if !chroot.is_empty() {
            check_path(&chroot).map_err(|why| bad(&why))?;
        }
        Ok(ZkUrl {
            servers,
            chroot,
            user,
            session_timeout,
        })
    }

    /// The servers in the form ZooKeeper's clients take (`h1:2181,h2:2181`),
    /// without the chroot: the backend puts it in front of each path itself,
    /// so that the chroot's own nodes are created as needed.
    pub(crate) fn connect_string(&self) -> String {
        self.servers.join(",")
    }

    /// The URL fit to print: any password replaced by `***`.
    pub(crate) fn redacted(&self) -> String {
        let user = url::redacted_user(self.user.as_ref());
        let query = if self.session_timeout == ZK_DEFAULT_SESSION_TIMEOUT {
            String::new()
        } else {
            format!("?session_timeout={}ms", self.session_timeout.as_millis())
        };
        format!("zk://{user}{}{}{query}", self.servers.join(","), self.chroot)
    }
}

/// The `session_timeout` of the query, or the default.
fn session_timeout(query: &str) -> std::result::Result<Duration, String> {
    let mut timeout = ZK_DEFAULT_SESSION_TIMEOUT;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("session_timeout", value)) => {
                timeout =
                    crate::duration::parse_duration(value).map_err(|e| format!("session_timeout: {e}"))?;
                if timeout.is_zero() {
                    return Err("session_timeout must be greater than zero".into());
                }
            }
            _ => return Err(format!("unknown parameter {pair:?} (known: session_timeout)")),
        }
    }
    Ok(timeout)
}

/// A path ZooKeeper accepts: `/` then segments that are neither empty nor
/// `.` or `..`, without the characters it refuses.
pub(crate) fn check_path(path: &str) -> std::result::Result<(), String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("path {path:?} must start with '/'"));
    };
    for segment in rest.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!(
                "path {path:?} has an empty, '.' or '..' segment, which ZooKeeper refuses"
            ));
        }
        if segment.chars().any(|c| c == '\0' || c.is_control()) {
            return Err(format!(
                "path {path:?} has a control character, which ZooKeeper refuses"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_servers_chroot_user_and_session_timeout() {
        let url = ZkUrl::parse("zk://app:secret@h1:2181,h2:2182/locks/app?session_timeout=5s").unwrap();
        assert_eq!(url.servers, ["h1:2181", "h2:2182"]);
        assert_eq!(url.chroot, "/locks/app");
        assert_eq!(url.user, Some(("app".into(), "secret".into())));
        assert_eq!(url.session_timeout, Duration::from_secs(5));
        assert_eq!(url.connect_string(), "h1:2181,h2:2182");
        assert_eq!(
            url.redacted(),
            "zk://app:***@h1:2181,h2:2182/locks/app?session_timeout=5000ms"
        );
        let plain = ZkUrl::parse("zk://127.0.0.1:2181/").unwrap();
        assert_eq!(plain.chroot, "");
        assert_eq!(plain.session_timeout, ZK_DEFAULT_SESSION_TIMEOUT);
        assert_eq!(plain.redacted(), "zk://127.0.0.1:2181");
    }

    #[test]
    fn refuses_what_zookeeper_would_and_never_shows_the_password() {
        for bad in [
            "zookeeper://h:1",
            "zk://h",
            "zk://h:port",
            "zk://:2181",
            "zk://h:1//a",
            "zk://h:1/a/../b",
            "zk://h:1?session_timeout=0s",
            "zk://h:1?session_timeout=soon",
            "zk://h:1?ttl=1s",
            "zk://:pw@h:1",
        ] {
            let error = ZkUrl::parse(bad).unwrap_err().to_string();
            assert!(error.contains("bad ZooKeeper URL"), "{bad}: {error}");
        }
        let error = ZkUrl::parse("zk://u:hunter2@h:1/a/../b").unwrap_err().to_string();
        assert!(!error.contains("hunter2"), "{error}");
    }
}
