//! quorumlock on etcd: the same client on an `etcd://` URL, against a
//! cluster of three real etcd members that this program starts once per
//! run, on the same machine as the Redis nodes. Every write there is a Raft
//! entry that a majority of members has fsynced before it counts, so beside
//! Redlock at N=5 it shows what a consistent store costs here.
//!
//! It runs in the N=5 rounds of (a) and (b) (alternating with the Redis
//! contenders, so that the ratios are within rounds) and as one more setup
//! of (e); [`crate::report`] puts its tables after those of the scenarios.
//! It has no targets.

use std::time::Duration;

use quorumlock_testkit::etcd::EtcdCluster;

use crate::contender::{Contender, Kind};
use crate::cpu;
use crate::rounds::{Budget, Entry, Round, Series};

/// Members of the cluster.
pub const MEMBERS: usize = 3;

/// The Redis node count whose rounds etcd joins, and whose rows its tables
/// show beside it.
pub const BESIDE: usize = 5;

/// Tasks of its throughput rounds (as the first row of (b)).
pub const TASKS: usize = 64;

/// The running cluster (its members are killed when it is dropped).
pub struct Etcd {
    cluster: EtcdCluster,
}

impl Etcd {
    /// Starts the members and waits for their leader.
    pub fn start() -> Etcd {
        Etcd {
            cluster: EtcdCluster::start(MEMBERS),
        }
    }

    /// The node list a contender connects to: one `etcd://` URL naming
    /// every member.
    pub fn urls(&self) -> Vec<String> {
        vec![self.cluster.url()]
    }

    /// A quorumlock client on the cluster (default options).
    pub fn client(&self) -> quorumlock::Redlock {
        quorumlock::Redlock::builder()
            .node(self.cluster.url())
            .build()
            .expect("quorumlock etcd config")
    }

    /// The etcd contender, warmed up with one cycle.
    pub async fn contender(&self) -> Contender {
        Contender::connect(Kind::Etcd, &self.urls(), true).await
    }

    /// User + system CPU time of the members so far.
    pub fn cpu(&self) -> Duration {
        self.cluster.pids().into_iter().map(cpu::process).sum()
    }
}

/// The (a) entry of the etcd contender, with the Redis contenders' budget:
/// the same sample count makes the p99s comparable.
pub fn entry(contender: &Contender, budget: Budget) -> Entry<'_> {
    Entry {
        name: "a:etcd".into(),
        contender,
        budget,
    }
}

/// The (a) series of the etcd contender.
pub fn series(rounds: Vec<Round>, budget: Budget) -> Series {
    Series {
        kind: Kind::Etcd,
        n: MEMBERS,
        rounds,
        cap: budget.cap,
    }
}
