//! What the URLs of the two one-cluster stores share: optional
//! `user:password@` credentials before a comma-separated list of
//! `host:port` members, with the password kept out of everything printed.

use std::result::Result;

/// A user name and its password, as given before `@`.
pub(crate) type Credentials = (String, String);

/// The authority of a URL (`[user:password@]host:port[,host:port...]`) split
/// into its credentials and its members, each checked to be `host:port`.
/// `what` names a member in the store's own word ("member", "server"), and
/// `usual_port` is the store's client port, for the message about a missing
/// one: a missing port is an error rather than a guess, since a guess that
/// reaches the wrong port fails far less clearly.
pub(crate) fn authority(
    authority: &str,
    what: &str,
    usual_port: u16,
) -> Result<(Option<Credentials>, Vec<String>), String> {
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => {
            let (name, password) = credentials.split_once(':').unwrap_or((credentials, ""));
            if name.is_empty() {
                return Err("a user name is needed before '@'".into());
            }
            (Some((name.to_owned(), password.to_owned())), hosts)
        }
        None => (None, authority),
    };
    let members = hosts
        .split(',')
        .map(|member| host_port(member, what, usual_port))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((user, members))
}

/// `user:***@` for printing, or nothing without credentials.
pub(crate) fn redacted_user(user: Option<&Credentials>) -> String {
    match user {
        Some((name, _)) => format!("{name}:***@"),
        None => String::new(),
    }
}

/// `host:port` with a host and a port that is a number.
fn host_port(member: &str, what: &str, usual_port: u16) -> Result<String, String> {
    let (host, port) = member
        .rsplit_once(':')
        .ok_or_else(|| format!("{what} {member:?} has no port (the usual client port is {usual_port})"))?;
    if host.is_empty() {
        return Err(format!("{what} {member:?} has no host"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("{what} {member:?}: port {port:?} is not a number from 0 to 65535"))?;
    Ok(member.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_members_are_split_and_checked() {
        let (user, members) = authority("app:pw@h1:2379,h2:2380", "member", 2379).unwrap();
        assert_eq!(user, Some(("app".into(), "pw".into())));
        assert_eq!(members, ["h1:2379", "h2:2380"]);
        assert_eq!(redacted_user(user.as_ref()), "app:***@");
        assert_eq!(
            authority("h:1", "server", 2181).unwrap(),
            (None, vec!["h:1".to_owned()])
        );
        for (bad, says) in [
            (":pw@h:1", "user name"),
            ("h", "no port (the usual client port is 2181)"),
            (":1", "no host"),
            ("h:port", "not a number"),
            ("h:1,", "no port"),
        ] {
            let message = authority(bad, "server", 2181).unwrap_err();
            assert!(message.contains(says), "{bad}: {message}");
        }
    }
}
