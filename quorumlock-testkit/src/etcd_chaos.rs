//! An etcd cluster as a target of the chaos checker: the faults a lock on
//! etcd has to survive (members killed and paused, the leader among them,
//! and a member cut off from the clients), applied while contenders run.

use std::fmt;

use crate::etcd::EtcdCluster;
use crate::faults::Target;
use crate::proxy::Proxy;
use crate::server::Paused;

/// A fault on an [`EtcdTarget`], or its end. "The leader" is the leader
/// when the action runs, found by asking the members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdAction {
    /// SIGKILL the leader: the others elect a new one.
    KillLeader,
    /// SIGKILL a follower: the cluster keeps its quorum and its leader.
    KillFollower,
    /// Start every killed member again, on its ports and data dir.
    StartKilled,
    /// SIGSTOP the leader: to the others it is partitioned away (they elect
    /// a new one); when resumed it finds itself deposed.
    PauseLeader,
    /// SIGCONT every paused member.
    ResumeAll,
    /// The clients' proxy in front of member `i` swallows all traffic: the
    /// member is cut off from the clients (not from its peers).
    CutOff(usize),
    /// Every client proxy back to normal, old connections reset.
    Reconnect,
}

impl fmt::Display for EtcdAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdAction::KillLeader => f.write_str("kill the leader"),
            EtcdAction::KillFollower => f.write_str("kill a follower"),
            EtcdAction::StartKilled => f.write_str("start the killed members"),
            EtcdAction::PauseLeader => f.write_str("pause the leader"),
            EtcdAction::ResumeAll => f.write_str("resume the paused members"),
            EtcdAction::CutOff(i) => write!(f, "cut member {i} off from the clients"),
            EtcdAction::Reconnect => f.write_str("reconnect every member"),
        }
    }
}

/// An [`EtcdCluster`] whose clients reach each member through a
/// [`Proxy`], so that a member can be cut off from them.
#[derive(Debug)]
pub struct EtcdTarget {
    /// The members.
    pub cluster: EtcdCluster,
    proxies: Vec<Proxy>,
    paused: Vec<Paused>,
    killed: Vec<usize>,
}

impl EtcdTarget {
    /// `cluster` behind one proxy per member. Must be called inside a tokio
    /// runtime (the proxies run on it).
    pub fn new(cluster: EtcdCluster) -> EtcdTarget {
        let proxies = (0..cluster.len())
            .map(|i| Proxy::start(cluster.client_port(i)))
            .collect();
        EtcdTarget {
            cluster,
            proxies,
            paused: Vec::new(),
            killed: Vec::new(),
        }
    }

    /// One running member other than the leader.
    fn follower(&self) -> usize {
        let leader = self.cluster.leader();
        (0..self.cluster.len())
            .find(|&i| i != leader && self.cluster.is_running(i))
            .expect("a running follower")
    }
}

impl Target for EtcdTarget {
    type Action = EtcdAction;

    fn urls(&self) -> Vec<String> {
        let members: Vec<String> = self
            .proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        vec![format!("etcd://{}", members.join(","))]
    }

    fn is_degraded(&self) -> bool {
        !self.paused.is_empty()
            || !self.killed.is_empty()
            || self
                .proxies
                .iter()
                .any(|p| p.fault() != crate::proxy::Fault::None)
    }

    fn apply(&mut self, action: &EtcdAction) {
        match action {
            EtcdAction::KillLeader => {
                let leader = self.cluster.leader();
                self.cluster.kill(leader);
                self.killed.push(leader);
            }
            EtcdAction::KillFollower => {
                let follower = self.follower();
                self.cluster.kill(follower);
                self.killed.push(follower);
            }
            EtcdAction::StartKilled => {
                for i in std::mem::take(&mut self.killed) {
                    self.cluster.restart(i);
                }
            }
            EtcdAction::PauseLeader => {
                let leader = self.cluster.leader();
                self.paused.push(self.cluster.pause(leader));
            }
            EtcdAction::ResumeAll => self.paused.clear(),
            EtcdAction::CutOff(i) => self.proxies[*i].black_hole(),
            EtcdAction::Reconnect => {
                for proxy in &self.proxies {
                    proxy.heal_and_reset();
                }
            }
        }
    }

    fn is_fault(action: &EtcdAction) -> bool {
        matches!(
            action,
            EtcdAction::KillLeader
                | EtcdAction::KillFollower
                | EtcdAction::PauseLeader
                | EtcdAction::CutOff(_)
        )
    }

    fn kind(action: &EtcdAction) -> &'static str {
        match action {
            EtcdAction::KillLeader => "kill leader",
            EtcdAction::KillFollower => "kill follower",
            EtcdAction::StartKilled => "start",
            EtcdAction::PauseLeader => "pause leader",
            EtcdAction::ResumeAll => "resume",
            EtcdAction::CutOff(_) => "cut off",
            EtcdAction::Reconnect => "reconnect",
        }
    }
}
