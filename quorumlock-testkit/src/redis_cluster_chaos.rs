//! Redis Clusters as the members of a quorum, as a target of the chaos
//! checker: the faults a lock on cluster members has to survive, applied to
//! the primary that serves the contended resource ([`RESOURCE`]) in one
//! member while contenders run. A primary killed (its replica promoted), and
//! the resource's slot migrating to another primary: held in the migrating
//! state for the fault's duration (the old primary serves the keys it still
//! has and answers `ASK` for the rest), then moved with its keys.

use std::fmt;
use std::thread;

use crate::checker::RESOURCE;
use crate::faults::Target;
use crate::redis_cluster::{Migration, RedisCluster};

/// A fault on a [`ClustersTarget`], or its end. Member indexes count from 0
/// in the order of [`Target::urls`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterAction {
    /// SIGKILL the primary serving [`RESOURCE`] in member `m` and wait
    /// until its replica serves the slot.
    KillPrimary(usize),
    /// Start every killed node again: it rejoins as a replica.
    StartKilled,
    /// Begin moving [`RESOURCE`]'s slot in member `m` to another primary.
    BeginMigration(usize),
    /// Finish every migration begun: the keys move, the slot is handed over.
    FinishMigrations,
}

impl fmt::Display for ClusterAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterAction::KillPrimary(m) => write!(f, "kill the resource's primary in member {m}"),
            ClusterAction::StartKilled => f.write_str("start the killed nodes"),
            ClusterAction::BeginMigration(m) => {
                write!(f, "begin migrating the resource's slot in member {m}")
            }
            ClusterAction::FinishMigrations => f.write_str("finish the migrations"),
        }
    }
}

/// Redis Clusters, one quorum member each.
#[derive(Debug)]
pub struct ClustersTarget {
    /// The members.
    pub clusters: Vec<RedisCluster>,
    killed: Vec<(usize, usize)>,
    migrating: Vec<(usize, Migration)>,
}

impl ClustersTarget {
    /// `members` clusters of `primaries` primaries with
    /// `replicas_per_primary` replicas each, started side by side.
    pub fn start(members: usize, primaries: usize, replicas_per_primary: usize) -> ClustersTarget {
        let starting: Vec<_> = (0..members)
            .map(|_| thread::spawn(move || RedisCluster::start(primaries, replicas_per_primary)))
            .collect();
        let clusters = starting
            .into_iter()
            .map(|start| start.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        ClustersTarget {
            clusters,
            killed: Vec::new(),
            migrating: Vec::new(),
        }
    }
}

impl Target for ClustersTarget {
    type Action = ClusterAction;

    /// One `redis+cluster://` URL per member.
    fn urls(&self) -> Vec<String> {
        self.clusters.iter().map(RedisCluster::url).collect()
    }

    fn is_degraded(&self) -> bool {
        !self.killed.is_empty() || !self.migrating.is_empty()
    }

    fn apply(&mut self, action: &ClusterAction) {
        match action {
            ClusterAction::KillPrimary(m) => {
                let cluster = &mut self.clusters[*m];
                let slot = cluster.slot_of(RESOURCE);
                let old = cluster.primary_for_slot(slot);
                cluster.failover_primary_of(slot);
                self.killed.push((*m, old));
            }
            ClusterAction::StartKilled => {
                for (m, node) in std::mem::take(&mut self.killed) {
                    self.clusters[m].restart(node);
                    self.clusters[m].wait_healthy();
                }
            }
            ClusterAction::BeginMigration(m) => {
                let cluster = &self.clusters[*m];
                let slot = cluster.slot_of(RESOURCE);
                let from = cluster.primary_for_slot(slot);
                let primaries = cluster.current_primaries();
                let to = *primaries.iter().find(|&&p| p != from).expect("another primary");
                if let Some(migration) = cluster.begin_migration(slot, to) {
                    self.migrating.push((*m, migration));
                }
            }
            ClusterAction::FinishMigrations => {
                for (m, migration) in std::mem::take(&mut self.migrating) {
                    self.clusters[m].finish_migration(migration);
                }
            }
        }
    }

    fn is_fault(action: &ClusterAction) -> bool {
        matches!(
            action,
            ClusterAction::KillPrimary(_) | ClusterAction::BeginMigration(_)
        )
    }

    fn kind(action: &ClusterAction) -> &'static str {
        match action {
            ClusterAction::KillPrimary(_) => "kill primary",
            ClusterAction::StartKilled => "start",
            ClusterAction::BeginMigration(_) => "migrate slot",
            ClusterAction::FinishMigrations => "finish migration",
        }
    }
}
