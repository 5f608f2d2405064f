//! Node URLs that name several hosts, and how a list of node URLs is cut
//! into URLs without cutting those apart.
//!
//! An etcd cluster, a ZooKeeper ensemble, a Redis Cluster and a
//! Sentinel-managed Redis master are each one node, named by one URL with
//! their servers comma separated (`etcd://h1:2379,h2:2379`,
//! `redis+sentinel://s1:26379,s2:26379/mymaster`), in a list whose URLs are
//! comma separated too.

use quorumlock::probe::NodeKind;
use quorumlock::redact_url;

/// The URLs in `text`: comma or newline separated, trimmed; empty entries
/// and lines starting with `#` dropped. A URL with several hosts
/// ([`is_multi_host`]) has them comma separated (`etcd://h1:2379,h2:2379`,
/// `redis+sentinel://s1:26379,s2:26379/mymaster`): the scheme-less items
/// after it are its hosts (the last with the URL's path), joined back to it.
pub(super) fn split(text: &str) -> Vec<String> {
    let items = text
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .filter(|url| !url.is_empty());
    let mut urls: Vec<String> = Vec::new();
    for item in items {
        match urls.last_mut() {
            Some(cluster) if is_multi_host(cluster) && !item.contains("://") => {
                cluster.push(',');
                cluster.push_str(item);
            }
            _ => urls.push(item.to_owned()),
        }
    }
    urls
}

/// A consensus store whose backend is a cargo feature of this binary.
struct Cluster {
    kind: NodeKind,
    /// The cargo feature of quorumlock-cli that builds its backend.
    feature: &'static str,
    /// Whether this binary was built with that feature.
    built: bool,
    /// What else building the feature needs, said after the install command.
    build_needs: &'static str,
}

/// Every consensus store: an etcd cluster, a ZooKeeper ensemble.
const CLUSTERS: &[Cluster] = &[
    Cluster {
        kind: NodeKind::Etcd,
        feature: "etcd",
        built: cfg!(feature = "etcd"),
        build_needs: "; building it needs protoc",
    },
    Cluster {
        kind: NodeKind::ZooKeeper,
        feature: "zookeeper",
        built: cfg!(feature = "zookeeper"),
        build_needs: "",
    },
];

/// Whether `url` names an etcd cluster: asked only in a build that can
/// check one.
#[cfg(feature = "etcd")]
pub(crate) fn is_etcd(url: &str) -> bool {
    NodeKind::of(url) == NodeKind::Etcd
}

/// Whether `url` names a ZooKeeper ensemble.
pub(crate) fn is_zookeeper(url: &str) -> bool {
    NodeKind::of(url) == NodeKind::ZooKeeper
}

/// Whether `url` names a Redis Cluster, its servers comma separated.
pub(crate) fn is_redis_cluster(url: &str) -> bool {
    NodeKind::of(url) == NodeKind::RedisCluster
}

/// Whether `url` names a Sentinel-managed master, its sentinels comma
/// separated.
pub(crate) fn is_sentinel(url: &str) -> bool {
    NodeKind::of(url) == NodeKind::Sentinel
}

/// Whether `url` names one node of several hosts, comma separated: an etcd
/// cluster, a ZooKeeper ensemble, a Redis Cluster or a Sentinel-managed
/// master.
fn is_multi_host(url: &str) -> bool {
    NodeKind::of(url).names_several_hosts()
}

/// The usage error for a cluster URL whose backend this build lacks. The
/// library's own error names its cargo feature; the binary's user needs to
/// know which build to install.
pub(super) fn missing_feature(url: &str) -> Option<String> {
    let kind = NodeKind::of(url);
    let cluster = CLUSTERS.iter().find(|c| c.kind == kind && !c.built)?;
    let scheme = url.split_once("://").map_or(url, |(scheme, _)| scheme);
    Some(format!(
        "{}: {}:// nodes need quorumlock built with the `{}` feature \
         (cargo install quorumlock-cli --features {}{})",
        redact_url(url),
        scheme,
        cluster.feature,
        cluster.feature,
        cluster.build_needs
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_on_commas_and_lines_without_comments() {
        let text = "# the fleet\nredis://a:1, redis://b:2\n\n  redis://c:3  \n  # redis://d:4\n";
        assert_eq!(split(text), ["redis://a:1", "redis://b:2", "redis://c:3"]);
    }

    #[test]
    fn an_etcd_url_keeps_its_members() {
        assert_eq!(split("etcd://a:1,b:2, c:3/locks"), ["etcd://a:1,b:2,c:3/locks"]);
        assert_eq!(split("etcds://u:pw@a:1,b:2"), ["etcds://u:pw@a:1,b:2"]);
        // A nodes file may give the members one a line.
        assert_eq!(
            split("# cluster\netcd://a:1,\nb:2\n# c:3\nc:3\n"),
            ["etcd://a:1,b:2,c:3"]
        );
        // A URL with a scheme is never a member.
        assert_eq!(
            split("etcd://a:1,b:2,redis://c:3"),
            ["etcd://a:1,b:2", "redis://c:3"]
        );
        assert_eq!(split("b:2,etcd://a:1"), ["b:2", "etcd://a:1"]);
    }

    #[test]
    fn a_zookeeper_url_keeps_its_servers() {
        assert_eq!(
            split("zk://a:1,b:2, c:3/locks?session_timeout=2s"),
            ["zk://a:1,b:2,c:3/locks?session_timeout=2s"]
        );
        assert_eq!(split("zk://u:pw@a:1,b:2"), ["zk://u:pw@a:1,b:2"]);
        // A nodes file may give the servers one a line.
        assert_eq!(
            split("# ensemble\nzk://a:1,\nb:2\n# c:3\nc:3/locks\n"),
            ["zk://a:1,b:2,c:3/locks"]
        );
        // A URL with a scheme is never a server.
        assert_eq!(split("zk://a:1,b:2,redis://c:3"), ["zk://a:1,b:2", "redis://c:3"]);
        assert_eq!(
            split("zk://a:1,b:2,etcd://c:3,d:4"),
            ["zk://a:1,b:2", "etcd://c:3,d:4"]
        );
        assert_eq!(split("b:2,zk://a:1"), ["b:2", "zk://a:1"]);
    }

    #[test]
    fn a_redis_cluster_url_keeps_its_servers() {
        assert_eq!(
            split("redis+cluster://u:pw@a:1,b:2, c:3/"),
            ["redis+cluster://u:pw@a:1,b:2,c:3/"]
        );
        assert_eq!(split("rediss+cluster://a:1,b:2"), ["rediss+cluster://a:1,b:2"]);
        // A nodes file may give the servers one a line.
        assert_eq!(
            split("# cluster\nredis+cluster://a:1,\nb:2\n# c:3\nc:3\n"),
            ["redis+cluster://a:1,b:2,c:3"]
        );
        // Redis members mix with plain nodes, on either side.
        assert_eq!(
            split("redis://x:1,redis+cluster://a:1,b:2,redis://c:3,rediss+cluster://d:4,e:5"),
            [
                "redis://x:1",
                "redis+cluster://a:1,b:2",
                "redis://c:3",
                "rediss+cluster://d:4,e:5"
            ]
        );
        assert_eq!(split("b:2,redis+cluster://a:1"), ["b:2", "redis+cluster://a:1"]);
    }

    #[test]
    fn a_sentinel_url_keeps_its_sentinels_and_the_master_after_the_last() {
        assert_eq!(
            split("redis+sentinel://:pw@a:1,b:2, c:3/mymaster/2"),
            ["redis+sentinel://:pw@a:1,b:2,c:3/mymaster/2"]
        );
        assert_eq!(
            split("rediss+sentinel://a:1,b:2/m,redis://c:3,redis+sentinel://d:4,e:5/n"),
            [
                "rediss+sentinel://a:1,b:2/m",
                "redis://c:3",
                "redis+sentinel://d:4,e:5/n"
            ]
        );
        assert_eq!(
            split("redis+sentinel://a:1,redis+cluster://b:2,c:3"),
            ["redis+sentinel://a:1", "redis+cluster://b:2,c:3"]
        );
    }

    #[test]
    fn each_kind_of_redis_member_is_told_apart() {
        assert!(is_redis_cluster("redis+cluster://a:1") && is_redis_cluster("rediss+cluster://a:1"));
        assert!(is_sentinel("redis+sentinel://a:1/m") && is_sentinel("rediss+sentinel://a:1/m"));
        for plain in ["redis://a:1", "rediss://a:1", "redis+sentinel://a:1/m"] {
            assert!(!is_redis_cluster(plain), "{plain}");
        }
        assert!(!is_sentinel("redis+cluster://a:1") && !is_sentinel("redis://a:1"));
        assert!(is_multi_host("redis+cluster://a:1") && !is_multi_host("redis://a:1"));
    }
}
