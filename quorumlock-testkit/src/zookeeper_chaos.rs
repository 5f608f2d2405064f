//! A ZooKeeper ensemble as a target of the chaos checker: the faults a
//! lock on ZooKeeper has to survive (servers killed and paused, the leader
//! among them, and a server cut off from the clients), applied while
//! contenders run.
//!
//! A cut-off server still talks to its peers, so it stays in the quorum:
//! its clients' sessions live on only if they move to another server
//! before the session timeout, which is what a lock's session has to do.

use std::fmt;

use crate::faults::Target;
use crate::proxy::{Fault, Proxy};
use crate::server::Paused;
use crate::zookeeper::ZkEnsemble;

/// A fault on a [`ZkTarget`], or its end. "The leader" is the leader when
/// the action runs, found with the servers' `srvr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZkAction {
    /// SIGKILL the leader: the others elect a new one, and every session
    /// survives that moves to them in time.
    KillLeader,
    /// SIGKILL a follower: the ensemble keeps its quorum and its leader.
    KillFollower,
    /// Start every killed server again, on its ports and data dir.
    StartKilled,
    /// SIGSTOP the leader: to the others it is partitioned away (they elect
    /// a new one); when resumed it finds itself deposed and follows.
    PauseLeader,
    /// SIGCONT every paused server.
    ResumeAll,
    /// The clients' proxy in front of server `i` swallows all traffic: the
    /// server is cut off from the clients (not from its peers).
    CutOff(usize),
    /// Every client proxy back to normal, old connections reset.
    Reconnect,
}

impl fmt::Display for ZkAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZkAction::KillLeader => f.write_str("kill the leader"),
            ZkAction::KillFollower => f.write_str("kill a follower"),
            ZkAction::StartKilled => f.write_str("start the killed servers"),
            ZkAction::PauseLeader => f.write_str("pause the leader"),
            ZkAction::ResumeAll => f.write_str("resume the paused servers"),
            ZkAction::CutOff(i) => write!(f, "cut server {i} off from the clients"),
            ZkAction::Reconnect => f.write_str("reconnect every server"),
        }
    }
}

/// A [`ZkEnsemble`] whose clients reach each server through a [`Proxy`],
/// so that a server can be cut off from them.
#[derive(Debug)]
pub struct ZkTarget {
    /// The servers.
    pub ensemble: ZkEnsemble,
    proxies: Vec<Proxy>,
    paused: Vec<Paused>,
    killed: Vec<usize>,
}

impl ZkTarget {
    /// `ensemble` behind one proxy per server. Must be called inside a
    /// tokio runtime (the proxies run on it).
    pub fn new(ensemble: ZkEnsemble) -> ZkTarget {
        let proxies = (0..ensemble.len())
            .map(|i| Proxy::start(ensemble.client_port(i)))
            .collect();
        ZkTarget {
            ensemble,
            proxies,
            paused: Vec::new(),
            killed: Vec::new(),
        }
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,...`: the proxies' ports, in the
    /// order of the servers.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: the proxies as the connect string
    /// of ZooKeeper's own clients (kazoo, zkCli).
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = self
            .proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        hosts.join(",")
    }

    /// The port of the proxy in front of server `i`: a client given only
    /// this one reaches only that server.
    pub fn proxy_port(&self, i: usize) -> u16 {
        self.proxies[i].port()
    }

    /// One running server other than the leader.
    fn follower(&self) -> usize {
        let leader = self.ensemble.leader();
        (0..self.ensemble.len())
            .find(|&i| i != leader && self.ensemble.is_running(i))
            .expect("a running follower")
    }
}

impl Target for ZkTarget {
    type Action = ZkAction;

    /// One URL for the whole ensemble, as a ZooKeeper client takes it.
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }

    fn is_degraded(&self) -> bool {
        !self.paused.is_empty()
            || !self.killed.is_empty()
            || self.proxies.iter().any(|p| p.fault() != Fault::None)
    }

    fn apply(&mut self, action: &ZkAction) {
        match action {
            ZkAction::KillLeader => {
                let leader = self.ensemble.leader();
                self.ensemble.kill(leader);
                self.killed.push(leader);
            }
            ZkAction::KillFollower => {
                let follower = self.follower();
                self.ensemble.kill(follower);
                self.killed.push(follower);
            }
            ZkAction::StartKilled => {
                for i in std::mem::take(&mut self.killed) {
                    self.ensemble.restart(i);
                }
            }
            ZkAction::PauseLeader => {
                let leader = self.ensemble.leader();
                self.paused.push(self.ensemble.pause(leader));
            }
            ZkAction::ResumeAll => self.paused.clear(),
            ZkAction::CutOff(i) => self.proxies[*i].black_hole(),
            ZkAction::Reconnect => {
                for proxy in &self.proxies {
                    proxy.heal_and_reset();
                }
            }
        }
    }

    fn is_fault(action: &ZkAction) -> bool {
        matches!(
            action,
            ZkAction::KillLeader | ZkAction::KillFollower | ZkAction::PauseLeader | ZkAction::CutOff(_)
        )
    }

    fn kind(action: &ZkAction) -> &'static str {
        match action {
            ZkAction::KillLeader => "kill leader",
            ZkAction::KillFollower => "kill follower",
            ZkAction::StartKilled => "start",
            ZkAction::PauseLeader => "pause leader",
            ZkAction::ResumeAll => "resume",
            ZkAction::CutOff(_) => "cut off",
            ZkAction::Reconnect => "reconnect",
        }
    }
}
