//! `etcd://` node URLs: one etcd cluster, given by some of its members.

use std::fmt;

use crate::error::{Error, Result, Setting};

/// A parsed `etcd[s]://[user:password@]host:port[,host:port...][/prefix]`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `host:port` of each member given (the client balances over them).
    pub(crate) members: Vec<String>,
    /// Prepended to every resource name: the lock of resource `r` lives
    /// under `<prefix>r/`. Empty, or ending in `/`.
    pub(crate) prefix: String,
    pub(crate) user: Option<(String, String)>,
    pub(crate) tls: bool,
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
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((credentials, hosts)) => {
                let (name, password) = credentials.split_once(':').unwrap_or((credentials, ""));
                if name.is_empty() {
                    return Err(bad("a user name is needed before '@'"));
                }
                (Some((name.to_owned(), password.to_owned())), hosts)
            }
            None => (None, authority),
        };
        let members = hosts
            .split(',')
            .map(|member| check_member(member).map_err(|why| bad(&why)))
            .collect::<Result<Vec<_>>>()?;
        let mut prefix = path.to_owned();
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        Ok(EtcdUrl {
            members,
            prefix,
            user,
            tls,
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
        let user = match &self.user {
            Some((name, _)) => format!("{name}:***@"),
            None => String::new(),
        };
        let path = self.prefix.trim_end_matches('/');
        let path = if path.is_empty() {
            String::new()
        } else {
            format!("/{path}")
        };
        format!("{scheme}://{user}{}{path}", self.members.join(","))
    }
}

/// `host:port`, with a port that parses; a missing port is an error rather
/// than a guess (etcd's client port is 2379, but a guess that reaches the
/// wrong port fails far less clearly).
fn check_member(member: &str) -> std::result::Result<String, String> {
    let (host, port) = member
        .rsplit_once(':')
        .ok_or_else(|| format!("member {member:?} has no port (etcd's client port is usually 2379)"))?;
    if host.is_empty() {
        return Err(format!("member {member:?} has no host"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("member {member:?}: port {port:?} is not a number from 0 to 65535"))?;
    Ok(member.to_owned())
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
        ] {
            let message = EtcdUrl::parse(url).unwrap_err().to_string();
            assert!(message.contains(says), "{url}: {message}");
            assert!(!message.contains("pw@"), "{message}");
        }
    }
}
