//! Configuration from the environment, for services that take their
//! settings from it (twelve-factor style), with the names the
//! `quorumlock` command line reads too.

use crate::builder::RedlockBuilder;
use crate::client::Redlock;
use crate::duration::parse_duration;
use crate::error::{Error, Result, Setting};

/// The node URLs, comma separated.
const NODES: &str = "QUORUMLOCK_NODES";

/// A builder method that takes a duration.
type SetDuration = fn(RedlockBuilder, std::time::Duration) -> RedlockBuilder;

/// The duration settings, each with the builder method it sets.
const DURATIONS: [(&str, SetDuration); 4] = [
    ("QUORUMLOCK_NODE_TIMEOUT", RedlockBuilder::node_timeout),
    ("QUORUMLOCK_CONNECT_TIMEOUT", RedlockBuilder::connect_timeout),
    ("QUORUMLOCK_WAIT", RedlockBuilder::wait),
    ("QUORUMLOCK_RETRY_DELAY", RedlockBuilder::retry_delay),
];

impl RedlockBuilder {
    /// Takes the settings given in the environment:
    ///
    /// | variable | sets | example |
    /// |---|---|---|
    /// | `QUORUMLOCK_NODES` | the nodes, comma separated (added to any given before) | `redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379` |
    /// | `QUORUMLOCK_NODE_TIMEOUT` | [`RedlockBuilder::node_timeout`] | `100ms` |
    /// | `QUORUMLOCK_CONNECT_TIMEOUT` | [`RedlockBuilder::connect_timeout`] | `1s` |
    /// | `QUORUMLOCK_WAIT` | [`RedlockBuilder::wait`] | `10s` |
    /// | `QUORUMLOCK_RETRY_DELAY` | [`RedlockBuilder::retry_delay`] | `200ms` |
    ///
    /// Durations are written as on the command line: `30s`, `500ms`, `2m`,
    /// `1m30s`; a plain number is seconds. A
    /// variable that is not set leaves its setting as it was; the command
    /// line tool reads the same names. Settings made after this call win.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the variable when one is set but empty, not
    /// UTF-8 or not a duration, or when `QUORUMLOCK_NODES` lists an empty
    /// URL. Bad URLs and out-of-range values are reported by
    /// [`RedlockBuilder::build`], as for any other source.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use quorumlock::Redlock;
    ///
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// // QUORUMLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
    /// // QUORUMLOCK_NODE_TIMEOUT=50ms
    /// let redlock = Redlock::builder()
    ///     .from_env()?
    ///     .min_validity(Duration::from_secs(1))
    ///     .build()?;
    /// println!("{} nodes, quorum {}", redlock.nodes(), redlock.quorum());
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_env(self) -> Result<Self> {
        self.with_vars(|name| match std::env::var(name) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(Error::config(Setting::Env(name), format!("{name} is not UTF-8")))
            }
        })
    }

    /// [`RedlockBuilder::from_env`] over any source of variables.
    fn with_vars(mut self, var: impl Fn(&'static str) -> Result<Option<String>>) -> Result<Self> {
        if let Some(list) = var(NODES)? {
            let urls = node_list(&list).ok_or_else(|| {
                Error::config(
                    Setting::Env(NODES),
                    format!("{NODES} has an empty entry: give the node URLs separated by single commas"),
                )
            })?;
            self = self.nodes(urls);
        }
        for (name, set) in DURATIONS {
            if let Some(text) = var(name)? {
                let value = parse_duration(&text).map_err(|error| match error {
                    Error::Config(error) => Error::config(Setting::Env(name), format!("{name}: {error}")),
                    other => other,
                })?;
                self = set(self, value);
            }
        }
        Ok(self)
    }
}

/// The schemes of URLs that list several hosts, comma separated: a
/// Redis Cluster's seeds, a master's sentinels, an etcd cluster's members,
/// a ZooKeeper ensemble's servers.
const MULTI_HOST_SCHEMES: &[&str] = &[
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "etcd://",
    "etcds://",
    "zk://",
];

/// The node URLs of a comma separated list: an item without a scheme
/// after a URL of [`MULTI_HOST_SCHEMES`] is one more host of that URL.
/// `None` when an entry is empty.
fn node_list(list: &str) -> Option<Vec<String>> {
    let mut urls: Vec<String> = Vec::new();
    for item in list.split(',').map(str::trim) {
        if item.is_empty() {
            return None;
        }
        match urls.last_mut() {
            Some(url) if !item.contains("://") && MULTI_HOST_SCHEMES.iter().any(|s| url.starts_with(s)) => {
                url.push(',');
                url.push_str(item);
            }
            _ => urls.push(item.to_owned()),
        }
    }
    Some(urls)
}

impl Redlock {
    /// A client configured from the environment alone: the nodes from
    /// `QUORUMLOCK_NODES` and the settings of [`RedlockBuilder::from_env`],
    /// every other setting at its default.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `QUORUMLOCK_NODES` is not set, and as for
    /// [`RedlockBuilder::from_env`] and [`RedlockBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use quorumlock::Redlock;
    ///
    /// # fn main() -> Result<(), quorumlock::Error> {
    /// let redlock = Redlock::from_env()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_env() -> Result<Redlock> {
        if std::env::var_os(NODES).is_none() {
            return Err(Error::config(
                Setting::Env(NODES),
                format!("{NODES} is not set: no nodes to lock on"),
            ));
        }
        Redlock::builder().from_env()?.build()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<RedlockBuilder> {
        let vars: HashMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Redlock::builder().with_vars(|name| Ok(vars.get(name).cloned()))
    }

    #[test]
    fn every_variable_sets_its_setting() {
        let redlock = from(&[
            (
                NODES,
                "redis://127.0.0.1:1, redis://127.0.0.1:2,redis://127.0.0.1:3",
            ),
            ("QUORUMLOCK_NODE_TIMEOUT", "250ms"),
            ("QUORUMLOCK_CONNECT_TIMEOUT", "2s"),
            ("QUORUMLOCK_WAIT", "1m30s"),
            ("QUORUMLOCK_RETRY_DELAY", "50ms"),
        ])
        .and_then(RedlockBuilder::build)
        .expect("valid settings");
        assert_eq!(redlock.nodes(), 3);
        let quorum = &redlock.backend.redlock("test").unwrap().quorum;
        assert_eq!(quorum.node_timeout, Duration::from_millis(250));
        let options = redlock.options();
        assert_eq!(options.wait, Duration::from_secs(90));
        assert_eq!(options.retry_delay, Duration::from_millis(50));
    }

    #[test]
    fn unset_variables_leave_the_defaults_and_earlier_settings() {
        let builder = Redlock::builder()
            .node("redis://127.0.0.1:1")
            .wait(Duration::from_secs(3));
        let redlock = builder
            .with_vars(|_| Ok(None))
            .and_then(RedlockBuilder::build)
            .expect("valid settings");
        assert_eq!(redlock.nodes(), 1);
        assert_eq!(redlock.options().wait, Duration::from_secs(3));
        assert_eq!(
            redlock.backend.redlock("test").unwrap().quorum.node_timeout,
            crate::DEFAULT_NODE_TIMEOUT
        );
    }

    #[test]
    fn a_url_of_several_hosts_keeps_them_in_the_node_list() {
        let list = "redis+cluster://a:1,b:2, redis://c:3,redis+sentinel://s:1,t:2/m,zk://z:1,y:2/locks";
        assert_eq!(
            node_list(list).unwrap(),
            [
                "redis+cluster://a:1,b:2",
                "redis://c:3",
                "redis+sentinel://s:1,t:2/m",
                "zk://z:1,y:2/locks"
            ]
        );
        assert_eq!(
            node_list("redis://a:1,b:2"),
            Some(vec!["redis://a:1".into(), "b:2".into()])
        );
        assert_eq!(node_list("redis://a:1,,redis://b:2"), None);
    }

    #[test]
    fn a_bad_value_is_a_config_error_naming_its_variable() {
        for (name, value) in [
            ("QUORUMLOCK_WAIT", "soon"),
            ("QUORUMLOCK_NODE_TIMEOUT", ""),
            ("QUORUMLOCK_RETRY_DELAY", "-1s"),
            (NODES, "redis://127.0.0.1:1,,redis://127.0.0.1:2"),
        ] {
            match from(&[(name, value)]) {
                Err(Error::Config(error)) => {
                    assert_eq!(error.setting(), Setting::Env(name), "{name}={value:?}: {error}");
                    assert!(error.message().contains(name), "{name}={value:?}: {error}");
                }
                other => panic!("{name}={value:?}: expected a config error, got {other:?}"),
            }
        }
    }
}
