//! Node URLs fit to print: never a password.

/// A node URL fit to print: any password replaced by `***`
/// (`redis://user:***@host:6379/0`). Use it wherever a node URL is shown
/// (logs, errors, status output); quorumlock's own messages and `Debug`
/// output never contain a password.
///
/// # Examples
///
/// ```
/// assert_eq!(quorumlock::redact_url("redis://app:s3cret@10.0.0.1:6379/2"), "redis://app:***@10.0.0.1:6379/2");
/// assert_eq!(quorumlock::redact_url("redis://10.0.0.1:6379"), "redis://10.0.0.1:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme) = url.find("://") else {
        // Not a URL: it cannot be told which part is secret.
        return "***".to_owned();
    };
    let authority_end = url[scheme + 3..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme + 3 + i);
    let shown = match url[..authority_end].rfind('@') {
        None => url.to_owned(),
        Some(at) => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &userinfo[..colon], &url[at..]),
                // `redis://secret@host`: redis-rs reads a lone user part as
                // the user name, but people write passwords there too.
                None if !userinfo.is_empty() => format!("{}***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
    };
    redact_query(&shown)
}

/// `unix:///run/redis.sock?db=1&pass=secret`: the password of a socket URL
/// travels in the query.
fn redact_query(url: &str) -> String {
    let Some(start) = url.find('?') else {
        return url.to_owned();
    };
    let (base, query) = url.split_at(start + 1);
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if matches!(name, "pass" | "password") => format!("{name}=***"),
            _ => param.to_owned(),
        })
        .collect();
    format!("{base}{}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact_url("rediss://u:p@ss:w@rd@h:1"), "rediss://u:***@h:1");
        assert_eq!(redact_url("redis://secret@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact_url("redis://h:6379/0?x=a@b"), "redis://h:6379/0?x=a@b");
        assert_eq!(redact_url("unix:///run/redis.sock"), "unix:///run/redis.sock");
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=1&pass=secret"),
            "unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(redact_url("secret@host:6379"), "***");
    }
}
