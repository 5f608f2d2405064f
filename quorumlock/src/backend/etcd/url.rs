//! `etcd://` node URLs: one etcd cluster, given by some of its members.

use std::fmt;

use crate::backend::cluster::url::{self, Credentials};
use crate::error::{Error, Result, Setting};

/// A parsed `etcd[s]://[user:password@]host:port[,host:port...][/prefix][?ca=PATH&cert=PATH&key=PATH]`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `host:port` of each member given (the client balances over them).
    pub(crate) members: Vec<String>,
    /// Prepended to every resource name: the lock of resource `r` lives
    /// under `<prefix>r/`. Empty, or ending in `/`.
    pub(crate) prefix: String,
    pub(crate) user: Option<Credentials>,
    pub(crate) tls: bool,
    /// `etcds://` only: PEM files of the CA to trust instead of the system's
    /// roots, and of a client certificate and its key (for members that
    /// require client certificates).
    pub(crate) ca: Option<String>,
    pub(crate) identity: Option<(String, String)>,
}

/// Never shows the password.
impl fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl EtcdUrl {
    /// Parses `url`, or says what is wrong with it (the message never
    /// contains the password).
    pub(crate) fn parse(url: &str) -> Result<EtcdUrl> {
        let bad = |why: &str| {
            Error::config(
                Setting::Nodes,
                format!("bad etcd URL {}: {why}", crate::redact::redact_url(url)),
            )
        };
        let (tls, rest) = match url.split_once("://") {
            Some(("etcd", rest)) => (false, rest),
            Some(("etcds", rest)) => (true, rest),
            _ => return Err(bad("expected etcd:// or etcds://")),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (ca, identity) = tls_files(query, tls).map_err(|why| bad(&why))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, members) = url::authority(authority, "member", 2379).map_err(|why| bad(&why))?;
        let mut prefix = path.to_owned();
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(EtcdUrl {
            members,
            prefix,
            user,
            tls,
            ca,
            identity,
        })
    }

    /// The endpoints in the form the etcd client takes.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.members.iter().map(|m| format!("{scheme}://{m}")).collect()
    }

    /// The URL fit to print: any password replaced by `***`.
    pub(crate) fn redacted(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        let user = url::redacted_user(self.user.as_ref());
        let path = self.prefix.trim_end_matches('/');
        let path = if path.is_empty() {
            String::new()
        } else {
            format!("/{path}")
        };
        let mut files: Vec<String> = self.ca.iter().map(|ca| format!("ca={ca}")).collect();
        if let Some((cert, key)) = &self.identity {
            files.extend([format!("cert={cert}"), format!("key={key}")]);
        }
        let query = if files.is_empty() {
            String::new()
        } else {
            format!("?{}", files.join("&"))
        };
        format!("{scheme}://{user}{}{path}{query}", self.members.join(","))
    }

    /// Makes sure the TLS files named exist and can be read, so that a
    /// wrong path is a configuration error now rather than a failed
    /// connection later.
    pub(crate) fn check_files(&self) -> Result<()> {
        let identity = self.identity.iter().flat_map(|(cert, key)| [cert, key]);
        for path in self.ca.iter().chain(identity) {
            if let Err(e) = std::fs::File::open(path) {
                return Err(Error::config(
                    Setting::Nodes,
                    format!("{}: cannot read {path}: {e}", self.redacted()),
                ));
            }
        }
        Ok(())
    }
}

/// The `ca`, `cert` and `key` files of the query: a CA, and a client
/// certificate with its key (both or neither), for `etcds://` only.
#[allow(clippy::type_complexity)]
fn tls_files(
    query: &str,
    tls: bool,
) -> std::result::Result<(Option<String>, Option<(String, String)>), String> {
    let (mut ca, mut cert, mut key) = (None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "ca" => &mut ca,
            "cert" => &mut cert,
            "key" => &mut key,
            _ => return Err(format!("unknown parameter {name:?} (known: ca, cert, key)")),
        };
        if value.is_empty() {
            return Err(format!("{name} needs a file path"));
        }
        *slot = Some(value.to_owned());
    }
    if !tls && (ca.is_some() || cert.is_some()) {
        return Err("ca, cert and key are for etcds:// (TLS) URLs".into());
    }
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => return Err("cert and key go together".into()),
    };
    Ok((ca, identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_prefix_and_user_are_read() {
        let url = EtcdUrl::parse("etcd://app:s3cret@10.0.0.1:2379,10.0.0.2:2379/locks").unwrap();
        assert_eq!(url.members, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(url.prefix, "locks/");
        assert_eq!(url.user, Some(("app".into(), "s3cret".into())));
        assert_eq!(url.endpoints(), ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]);
        assert_eq!(url.redacted(), "etcd://app:***@10.0.0.1:2379,10.0.0.2:2379/locks");
        assert!(!format!("{url:?}").contains("s3cret"));
        let plain = EtcdUrl::parse("etcds://h:2379").unwrap();
        assert_eq!((plain.prefix.as_str(), plain.tls), ("", true));
        assert_eq!(plain.endpoints(), ["https://h:2379"]);
        let files = EtcdUrl::parse("etcds://h:2379/app?ca=/etc/etcd/ca.pem&cert=/c.pem&key=/k.pem").unwrap();
        assert_eq!(files.ca.as_deref(), Some("/etc/etcd/ca.pem"));
        assert_eq!(files.identity, Some(("/c.pem".into(), "/k.pem".into())));
        assert_eq!(files.prefix, "app/");
        assert_eq!(
            files.redacted(),
            "etcds://h:2379/app?ca=/etc/etcd/ca.pem&cert=/c.pem&key=/k.pem"
        );
        let message = files.check_files().unwrap_err().to_string();
        assert!(message.contains("cannot read"), "{message}");
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        for (url, says) in [
            ("etcd://h", "no port"),
            ("etcd://:2379", "no host"),
            ("etcd://h:99999", "not a number"),
            ("etcd://a:pw@h:1,", "no port"),
            ("redis://h:1", "expected etcd://"),
            ("etcd://:pw@h:1", "user name"),
            ("etcd://h:1?ca=/x.pem", "etcds://"),
            ("etcds://h:1?cert=/c.pem", "go together"),
            ("etcds://h:1?ca=", "needs a file path"),
            ("etcds://h:1?pem=/x", "unknown parameter"),
        ] {
            let message = EtcdUrl::parse(url).unwrap_err().to_string();
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains("pw@"), "{message}");
        }
    }
}
