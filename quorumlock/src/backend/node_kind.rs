//! Which kind of node a node URL names, read from its scheme: the one place
//! that maps a scheme to a store.

/// What one node URL names, read from its scheme alone (the URL is not
/// otherwise checked: the client's builder does that).
///
/// ```
/// use quorumlock::probe::NodeKind;
///
/// assert_eq!(NodeKind::of("redis://10.0.0.1:6379"), NodeKind::Server);
/// assert_eq!(NodeKind::of("rediss+sentinel://s1:26379,s2:26379/mymaster"), NodeKind::Sentinel);
/// assert_eq!(NodeKind::of("etcd://h1:2379,h2:2379,h3:2379"), NodeKind::Etcd);
/// assert!(NodeKind::of("zk://h1:2181,h2:2181").is_consensus_store());
/// assert!(NodeKind::of("redis+cluster://h1:7000").names_several_hosts());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// One Redis server: `redis://`, `rediss://`, `unix://` and the redis
    /// crate's other forms; a Redlock node.
    Server,
    /// A Redis Cluster as one Redlock node: `redis+cluster://`,
    /// `rediss+cluster://`.
    RedisCluster,
    /// The master that Redis Sentinels manage, as one Redlock node:
    /// `redis+sentinel://`, `rediss+sentinel://`.
    Sentinel,
    /// An etcd cluster, alone in the client: `etcd://`, `etcds://`.
    Etcd,
    /// A ZooKeeper ensemble, alone in the client: `zk://`.
    ZooKeeper,
}

impl NodeKind {
    /// The kind of node `url` names.
    pub fn of(url: &str) -> NodeKind {
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("redis+cluster" | "rediss+cluster") => NodeKind::RedisCluster,
            Some("redis+sentinel" | "rediss+sentinel") => NodeKind::Sentinel,
            Some("etcd" | "etcds") => NodeKind::Etcd,
            Some("zk") => NodeKind::ZooKeeper,
            _ => NodeKind::Server,
        }
    }

    /// Whether one URL of this kind lists several hosts, comma separated
    /// (a list of node URLs split at commas must join them back).
    pub fn names_several_hosts(self) -> bool {
        self != NodeKind::Server
    }

    /// Whether this kind is a whole consensus store (etcd, ZooKeeper) whose
    /// own quorum replaces the Redlock majority: it is the client's only
    /// node.
    pub fn is_consensus_store(self) -> bool {
        matches!(self, NodeKind::Etcd | NodeKind::ZooKeeper)
    }
}
