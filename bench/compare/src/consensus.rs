//! quorumlock on consensus stores: the same client on an `etcd://` or a
//! `zk://` URL, against three real etcd members or three ZooKeeper servers
//! that this program starts once per run, on the same machine as the Redis
//! nodes. A write there counts once a majority of the members has logged
//! it (etcd's Raft, ZooKeeper's ZAB), so beside Redlock at N=5 they show
//! what a consistent store costs here.
//!
//! Both run in the N=5 rounds of (a) and (b) (alternating with the Redis
//! contenders, so that the ratios are within rounds) and as more setups of
//! (e); [`crate::report`] puts their tables after those of the scenarios.
//! They have no targets.

use std::time::Duration;

use quorumlock_testkit::etcd::EtcdCluster;
use quorumlock_testkit::zookeeper::ZkEnsemble;

use crate::contender::{Contender, Kind};
use crate::cpu;
use crate::rounds::{Budget, Entry, Round, Series};

/// The consensus stores, in the order of their rows.
pub const KINDS: [Kind; 2] = [Kind::Etcd, Kind::ZooKeeper];

/// Members of each store (etcd members, ZooKeeper servers).
pub const MEMBERS: usize = 3;

/// The Redis node count whose rounds the stores join, and whose rows their
/// tables show beside them.
pub const BESIDE: usize = 5;

/// Tasks of their throughput rounds (as the first row of (b)).
pub const TASKS: usize = 64;

/// Whether `kind` runs on a consensus store rather than on Redis nodes.
pub fn is_store(kind: Kind) -> bool {
    KINDS.contains(&kind)
}

/// The store's name in table headers and ratio columns.
pub fn name(kind: Kind) -> &'static str {
    match kind {
        Kind::ZooKeeper => "ZooKeeper",
        _ => "etcd",
    }
}

/// What the store column of a table says of it.
pub fn describe(kind: Kind) -> String {
    match kind {
        Kind::ZooKeeper => format!("{MEMBERS} ZooKeeper servers"),
        _ => format!("{MEMBERS} etcd members"),
    }
}

enum Cluster {
    Etcd(EtcdCluster),
    ZooKeeper(ZkEnsemble),
}

/// One running store (its members are killed when it is dropped).
pub struct Store {
    kind: Kind,
    cluster: Cluster,
}

impl Store {
    /// Starts the members of the `kind` store and waits for their leader.
    pub fn start(kind: Kind) -> Store {
        let cluster = match kind {
            Kind::Etcd => Cluster::Etcd(EtcdCluster::start(MEMBERS)),
            Kind::ZooKeeper => Cluster::ZooKeeper(ZkEnsemble::start_durable(MEMBERS)),
            _ => panic!("{kind:?} is not a consensus store"),
        };
        Store { kind, cluster }
    }

    /// Every store of [`KINDS`], started at once: three JVMs take seconds
    /// to come up, which etcd's start need not wait for.
    pub fn start_all() -> Vec<Store> {
        std::thread::scope(|scope| {
            let started: Vec<_> = KINDS
                .into_iter()
                .map(|kind| scope.spawn(move || Store::start(kind)))
                .collect();
            started
                .into_iter()
                .map(|s| s.join().expect("a consensus store started"))
                .collect()
        })
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn url(&self) -> String {
        match &self.cluster {
            Cluster::Etcd(cluster) => cluster.url(),
            Cluster::ZooKeeper(ensemble) => ensemble.url(),
        }
    }

    /// The node list a contender connects to: one URL naming every member.
    pub fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }

    /// A quorumlock client on the store (default options).
    pub fn client(&self) -> quorumlock::Redlock {
        quorumlock::Redlock::builder()
            .node(self.url())
            .build()
            .unwrap_or_else(|e| panic!("quorumlock {} config: {e}", name(self.kind)))
    }

    /// The store's contender, warmed up with one cycle.
    pub async fn contender(&self) -> Contender {
        Contender::connect(self.kind, &self.urls()).await
    }

    /// User + system CPU time of the members so far.
    pub fn cpu(&self) -> Duration {
        let pids = match &self.cluster {
            Cluster::Etcd(cluster) => cluster.pids(),
            Cluster::ZooKeeper(ensemble) => ensemble.pids(),
        };
        pids.into_iter().map(cpu::process).sum()
    }

    /// Its (a) entry, with the Redis contenders' budget: the same sample
    /// count makes the p99s comparable.
    pub fn entry<'a>(&self, contender: &'a Contender, budget: Budget) -> Entry<'a> {
        Entry {
            name: format!("a:{:?}", self.kind),
            contender,
            budget,
        }
    }

    /// Its (a) series.
    pub fn series(&self, rounds: Vec<Round>, budget: Budget) -> Series {
        Series {
            kind: self.kind,
            n: MEMBERS,
            rounds,
            cap: budget.cap,
        }
    }
}
