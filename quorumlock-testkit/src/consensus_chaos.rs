//! A consensus store (an etcd cluster, a ZooKeeper ensemble) as a target
//! of the chaos checker: the faults a lock on such a store has to survive
//! (members killed and paused, the leader among them, and a member cut off
//! from the clients), applied while contenders run.
//!
//! One target serves every such store, as the faults are the same: the
//! store's part is [`Members`], what the test kit's cluster type already
//! does (start, kill, restart, pause a member, name the leader).
//!
//! A cut-off member still talks to its peers, so it stays in the quorum:
//! its clients must move to another member (a ZooKeeper session before its
//! timeout, an etcd client before its lease ends), which is what a lock on
//! the store has to survive.

use std::fmt;

use crate::etcd::EtcdCluster;
use crate::faults::Target;
use crate::pause::Paused;
use crate::proxy::{Fault, Proxy};
use crate::zookeeper::ZkEnsemble;

/// The members of a consensus store, as the test kit runs them: what a
/// [`ConsensusTarget`] needs to fault them.
// No `is_empty`: a store always has at least one member.
#[allow(clippy::len_without_is_empty)]
pub trait Members: fmt::Debug + Send + Sync + 'static {
    /// The scheme of the store's node URLs (`etcd`, `zk`).
    const SCHEME: &'static str;

    /// Starts `members` members on free loopback ports and waits until
    /// they serve under one leader.
    fn start(members: usize) -> Self;

    /// `SCHEME://127.0.0.1:P1,127.0.0.1:P2,...`: the client ports of all
    /// members, without proxies.
    fn url(&self) -> String;

    /// The number of members, running or not.
    fn len(&self) -> usize;

    /// The client port of member `i` (kept across restarts).
    fn client_port(&self, i: usize) -> u16;

    /// The leader the running members agree on (waiting for an election).
    fn leader(&self) -> usize;

    /// Whether member `i` has been started and not killed.
    fn is_running(&self, i: usize) -> bool;

    /// SIGKILLs member `i` (a crash).
    fn kill(&mut self, i: usize);

    /// Starts member `i` again on its ports and data dir.
    fn restart(&mut self, i: usize);

    /// Freezes member `i` until the guard is dropped.
    fn pause(&self, i: usize) -> Paused;
}

/// [`Members`] of a test kit cluster type, whose inherent methods have the
/// trait's names.
macro_rules! members_of {
    ($servers:ty, $scheme:literal) => {
        impl Members for $servers {
            const SCHEME: &'static str = $scheme;

            fn start(members: usize) -> Self {
                <$servers>::start(members)
            }

            fn url(&self) -> String {
                <$servers>::url(self)
            }

            fn len(&self) -> usize {
                <$servers>::len(self)
            }

            fn client_port(&self, i: usize) -> u16 {
                <$servers>::client_port(self, i)
            }

            fn leader(&self) -> usize {
                <$servers>::leader(self)
            }

            fn is_running(&self, i: usize) -> bool {
                <$servers>::is_running(self, i)
            }

            fn kill(&mut self, i: usize) {
                <$servers>::kill(self, i)
            }

            fn restart(&mut self, i: usize) {
                <$servers>::restart(self, i)
            }

            fn pause(&self, i: usize) -> Paused {
                <$servers>::pause(self, i)
            }
        }
    };
}

members_of!(EtcdCluster, "etcd");
members_of!(ZkEnsemble, "zk");

/// A fault on a [`ConsensusTarget`], or its end. "The leader" is the
/// leader when the action runs, found by asking the members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsensusAction {
    /// SIGKILL the leader: the others elect a new one.
    KillLeader,
    /// SIGKILL a follower: the store keeps its quorum and its leader.
    KillFollower,
    /// Start every killed member again, on its ports and data dir.
    StartKilled,
    /// SIGSTOP the leader: to the others it is partitioned away (they elect
    /// a new one); when resumed it finds itself deposed and follows.
    PauseLeader,
    /// SIGCONT every paused member.
    ResumeAll,
    /// The clients' proxy in front of member `i` swallows all traffic: the
    /// member is cut off from the clients (not from its peers).
    CutOff(usize),
    /// Every client proxy back to normal, old connections reset.
    Reconnect,
}

impl fmt::Display for ConsensusAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsensusAction::KillLeader => f.write_str("kill the leader"),
            ConsensusAction::KillFollower => f.write_str("kill a follower"),
            ConsensusAction::StartKilled => f.write_str("start the killed members"),
            ConsensusAction::PauseLeader => f.write_str("pause the leader"),
            ConsensusAction::ResumeAll => f.write_str("resume the paused members"),
            ConsensusAction::CutOff(i) => write!(f, "cut member {i} off from the clients"),
            ConsensusAction::Reconnect => f.write_str("reconnect every member"),
        }
    }
}

/// The members of a store whose clients reach each member through a
/// [`Proxy`], so that a member can be cut off from them.
#[derive(Debug)]
pub struct ConsensusTarget<S: Members> {
    /// The members.
    pub members: S,
    proxies: Vec<Proxy>,
    paused: Vec<Paused>,
    killed: Vec<usize>,
}

impl<S: Members> ConsensusTarget<S> {
    /// `members` behind one proxy per member. Must be called inside a
    /// tokio runtime (the proxies run on it).
    pub fn new(members: S) -> ConsensusTarget<S> {
        let proxies = (0..members.len())
            .map(|i| Proxy::start(members.client_port(i)))
            .collect();
        ConsensusTarget {
            members,
            proxies,
            paused: Vec::new(),
            killed: Vec::new(),
        }
    }

    /// `SCHEME://127.0.0.1:P1,127.0.0.1:P2,...`: one URL for the whole
    /// store, the proxies' ports in the order of the members.
    pub fn url(&self) -> String {
        format!("{}://{}", S::SCHEME, self.connect_string())
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: the proxies as the store's own
    /// clients take them (`etcdctl --endpoints`, kazoo, zkCli).
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = self
            .proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        hosts.join(",")
    }

    /// The port of the proxy in front of member `i`: a client given only
    /// this one reaches only that member.
    pub fn proxy_port(&self, i: usize) -> u16 {
        self.proxies[i].port()
    }

    /// One running member other than the leader.
    fn follower(&self) -> usize {
        let leader = self.members.leader();
        (0..self.members.len())
            .find(|&i| i != leader && self.members.is_running(i))
            .expect("a running follower")
    }
}

impl<S: Members> Target for ConsensusTarget<S> {
    type Action = ConsensusAction;

    /// One URL for the whole store, as its client takes it.
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }

    fn is_degraded(&self) -> bool {
        !self.paused.is_empty()
            || !self.killed.is_empty()
            || self.proxies.iter().any(|p| p.fault() != Fault::None)
    }

    fn apply(&mut self, action: &ConsensusAction) {
        match action {
            ConsensusAction::KillLeader => {
                let leader = self.members.leader();
                self.members.kill(leader);
                self.killed.push(leader);
            }
            ConsensusAction::KillFollower => {
                let follower = self.follower();
                self.members.kill(follower);
                self.killed.push(follower);
            }
            ConsensusAction::StartKilled => {
                for i in std::mem::take(&mut self.killed) {
                    self.members.restart(i);
                }
            }
            ConsensusAction::PauseLeader => {
                let leader = self.members.leader();
                self.paused.push(self.members.pause(leader));
            }
            ConsensusAction::ResumeAll => self.paused.clear(),
            ConsensusAction::CutOff(i) => self.proxies[*i].black_hole(),
            ConsensusAction::Reconnect => {
                for proxy in &self.proxies {
                    proxy.heal_and_reset();
                }
            }
        }
    }

    fn is_fault(action: &ConsensusAction) -> bool {
        matches!(
            action,
            ConsensusAction::KillLeader
                | ConsensusAction::KillFollower
                | ConsensusAction::PauseLeader
                | ConsensusAction::CutOff(_)
        )
    }

    fn kind(action: &ConsensusAction) -> &'static str {
        match action {
            ConsensusAction::KillLeader => "kill leader",
            ConsensusAction::KillFollower => "kill follower",
            ConsensusAction::StartKilled => "start",
            ConsensusAction::PauseLeader => "pause leader",
            ConsensusAction::ResumeAll => "resume",
            ConsensusAction::CutOff(_) => "cut off",
            ConsensusAction::Reconnect => "reconnect",
        }
    }
}
