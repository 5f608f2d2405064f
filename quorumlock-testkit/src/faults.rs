//! Fault schedules for the chaos suite: a [`Cluster`] of nodes (each a
//! `redis-server`, optionally behind a [`Proxy`] and on a [`SkewedClock`])
//! and a [`Schedule`] of timed [`Action`]s applied to it while the checker's
//! contenders run.
//!
//! A schedule is a script, not a set of timers: `wait`, `await_acquisition`
//! and `then(action)` run one after the other on a blocking thread (killing,
//! restarting and pausing servers block), so the contenders' runtime is never
//! held up by a fault being applied.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::fake::FakeNode;
use crate::pause::Paused;
use crate::proxy::{Fault, Proxy};
use crate::server::{Persistence, RedisServer, pause_all};
use crate::skew::SkewedClock;

/// One node of a [`Cluster`].
#[derive(Debug)]
pub struct ClusterNode {
    /// The node's `redis-server`.
    pub server: RedisServer,
    /// The proxy clients connect through, after [`Cluster::with_proxies`].
    pub proxy: Option<Proxy>,
    /// Whether the node runs on the cluster's skewed clock.
    pub skewed: bool,
    paused: Option<Paused>,
    /// The key another owner holds on the node (see [`Action::Occupy`]).
    occupied: Option<String>,
}

/// The token of the owner that [`Action::Occupy`] stands for.
const OTHER_OWNER: &str = "chaos:other-owner";

/// How long the other owner's key lives if nothing vacates it: longer than
/// any scenario, so that only [`Action::Vacate`] ends an occupation.
const OCCUPY_TTL_MS: &str = "600000";

/// How long [`Action::Occupy`] waits for a node that a contender holds to
/// free the key: a hold and its release, with room for a loaded machine.
const OCCUPY_LIMIT: Duration = Duration::from_secs(20);

/// Deletes `KEYS[1]` only while it holds `ARGV[1]`.
const DELETE_IF_OWNED: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The nodes a scenario runs against, and the faults currently applied.
#[derive(Debug)]
pub struct Cluster {
    /// The real nodes, in the order of [`Cluster::urls`].
    pub nodes: Vec<ClusterNode>,
    /// The wall clock of the skewed nodes, if any.
    pub clock: Option<Arc<SkewedClock>>,
    /// Fake nodes speaking broken RESP, listed after the real ones.
    pub fakes: Vec<FakeNode>,
}

impl Cluster {
    /// `n` nodes with `persistence`, clients connecting directly.
    pub fn start(n: usize, persistence: Persistence) -> Cluster {
        Cluster::from_servers(
            (0..n)
                .map(|_| RedisServer::start_with(persistence, &[]))
                .collect(),
        )
    }

    /// `n` nodes with `persistence`; those listed in `skewed` run on `clock`
    /// (from their start on, and again after every restart).
    pub fn start_skewed(n: usize, persistence: Persistence, clock: SkewedClock, skewed: &[usize]) -> Cluster {
        let servers = (0..n)
            .map(|i| {
                if skewed.contains(&i) {
                    RedisServer::start_skewed(&clock, persistence, &[])
                } else {
                    RedisServer::start_with(persistence, &[])
                }
            })
            .collect();
        let mut cluster = Cluster::from_servers(servers);
        for &i in skewed {
            cluster.nodes[i].skewed = true;
        }
        cluster.clock = Some(Arc::new(clock));
        cluster
    }

    /// Wraps running servers.
    pub fn from_servers(servers: Vec<RedisServer>) -> Cluster {
        let nodes = servers
            .into_iter()
            .map(|server| ClusterNode {
                server,
                proxy: None,
                skewed: false,
                paused: None,
                occupied: None,
            })
            .collect();
        Cluster {
            nodes,
            clock: None,
            fakes: Vec::new(),
        }
    }

    /// Puts a fault-injecting proxy in front of every node; clients then
    /// connect through the proxies. Must be called inside a tokio runtime.
    pub fn with_proxies(mut self) -> Cluster {
        for node in &mut self.nodes {
            node.proxy = Some(Proxy::start(node.server.port()));
        }
        self
    }

    /// Adds a fake node (after the real ones) to the nodes clients use.
    pub fn with_fake(mut self, fake: FakeNode) -> Cluster {
        self.fakes.push(fake);
        self
    }

    /// The URLs clients use: the proxies' when there are proxies, then the
    /// fake nodes'.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.proxy.as_ref().map_or_else(|| n.server.url(), Proxy::url))
            .chain(self.fakes.iter().map(FakeNode::url))
            .collect()
    }

    /// The server of node `i`.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.nodes[i].server
    }

    /// Whether a fault is in force: a node down or paused, a proxy fault or
    /// latency, a skewed clock, a fake node.
    pub fn is_degraded(&self) -> bool {
        let clock_skewed = self.clock.as_ref().is_some_and(|c| c.params() != (1.0, 0))
            && self.nodes.iter().any(|n| n.skewed);
        clock_skewed
            || !self.fakes.is_empty()
            || self.nodes.iter().any(|n| {
                !n.server.is_running()
                    || n.paused.is_some()
                    || n.occupied.is_some()
                    || n.proxy
                        .as_ref()
                        .is_some_and(|p| p.fault() != Fault::None || !p.latency().is_zero())
            })
    }

    /// Applies `action`. Blocks (restarts wait for the server to answer).
    pub fn apply(&mut self, action: &Action) {
        match action {
            Action::Kill(nodes) => {
                for &i in nodes {
                    self.nodes[i].paused = None;
                    self.nodes[i].server.kill();
                }
            }
            Action::Restart(nodes) => {
                // Kill them all first: a majority goes down at once.
                for &i in nodes {
                    self.nodes[i].paused = None;
                    self.nodes[i].server.kill();
                }
                for &i in nodes {
                    self.nodes[i].server.restart();
                }
            }
            Action::Start(nodes) => {
                for &i in nodes {
                    assert!(!self.nodes[i].server.is_running(), "start: node {i} is running");
                    self.nodes[i].server.restart();
                }
            }
            Action::Pause(nodes) => {
                let paused = pause_all(nodes.iter().map(|&i| &self.nodes[i].server));
                for (&i, guard) in nodes.iter().zip(paused) {
                    self.nodes[i].paused = Some(guard);
                }
            }
            Action::Resume(nodes) => {
                for &i in nodes {
                    self.nodes[i].paused = None;
                }
            }
            Action::BlackHole(nodes) => self.proxies(nodes, Proxy::black_hole),
            Action::Refuse(nodes) => self.proxies(nodes, Proxy::refuse),
            Action::Latency(nodes, latency) => self.proxies(nodes, |p| p.set_latency(*latency)),
            Action::Heal(nodes) => self.proxies(nodes, |p| {
                if p.fault() == Fault::BlackHole {
                    p.heal_and_reset();
                } else {
                    p.heal();
                }
            }),
            Action::ClockRate(rate) => self.clock().set_rate(*rate),
            Action::ClockJump(delta_ms) => self.clock().jump(*delta_ms),
            Action::Occupy(nodes, key) => {
                for &i in nodes {
                    self.occupy(i, key);
                }
            }
            Action::Vacate(nodes) => {
                for &i in nodes {
                    if let Some(key) = self.nodes[i].occupied.take() {
                        self.nodes[i]
                            .server
                            .command(&["EVAL", DELETE_IF_OWNED, "1", &key, OTHER_OWNER])
                            .expect("vacate");
                    }
                }
            }
        }
    }

    /// Another owner takes `key` on node `i` as a client would (`SET NX`),
    /// polling every millisecond while a contender holds it there.
    fn occupy(&mut self, i: usize, key: &str) {
        let since = std::time::Instant::now();
        let server = &self.nodes[i].server;
        while !server
            .command(&["SET", key, OTHER_OWNER, "NX", "PX", OCCUPY_TTL_MS])
            .expect("occupy")
            .starts_with("+OK")
        {
            assert!(
                since.elapsed() < OCCUPY_LIMIT,
                "occupy: node {i} never freed {key}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.nodes[i].occupied = Some(key.to_string());
    }

    /// Ends every fault except clock skew: resumes paused nodes, restarts
    /// killed ones, heals proxies.
    pub fn heal_all(&mut self) {
        for node in &mut self.nodes {
            node.paused = None;
            if !node.server.is_running() {
                node.server.restart();
            }
            if let Some(proxy) = &node.proxy {
                proxy.heal_and_reset();
            }
        }
    }

    /// The number of keys on each node (straight to the server, not through
    /// its proxy); `None` for a node that is down.
    pub fn dbsizes(&self) -> Vec<Option<i64>> {
        self.nodes
            .iter()
            .map(|n| n.server.is_running().then(|| crate::dbsize(&n.server)))
            .collect()
    }

    fn proxies(&self, nodes: &[usize], f: impl Fn(&Proxy)) {
        for &i in nodes {
            f(self.nodes[i].proxy.as_ref().expect("this cluster has no proxies"));
        }
    }

    fn clock(&self) -> &SkewedClock {
        self.clock.as_deref().expect("this cluster has no skewed clock")
    }
}

/// A fault (or its end) applied to some nodes of a [`Cluster`].
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// SIGKILL: a crash, nothing flushed.
    Kill(Vec<usize>),
    /// SIGKILL all, then start each again on its port and directory (keys
    /// survive only with AOF persistence).
    Restart(Vec<usize>),
    /// Start killed nodes again on their ports and directories (the end of
    /// a crash that kept them down for a while).
    Start(Vec<usize>),
    /// SIGSTOP all with one signal: connects succeed, replies hang.
    Pause(Vec<usize>),
    /// SIGCONT.
    Resume(Vec<usize>),
    /// The proxies swallow all traffic (a silent partition).
    BlackHole(Vec<usize>),
    /// The proxies reset every connection (a partition that answers RST).
    Refuse(Vec<usize>),
    /// The proxies delay every chunk by this much in each direction.
    Latency(Vec<usize>, Duration),
    /// The proxies back to normal; after a black hole, old connections are
    /// cut (see [`Proxy::heal_and_reset`]).
    Heal(Vec<usize>),
    /// The skewed nodes' clock runs this many times as fast from now on.
    ClockRate(f64),
    /// The skewed nodes' clock jumps by this many milliseconds.
    ClockJump(i64),
    /// Another owner takes the key on these nodes, once each is free of the
    /// contenders: they refuse every contender, so that a lock is granted
    /// only by a bare majority of the others (with three nodes).
    Occupy(Vec<usize>, String),
    /// The other owner gives the key back on these nodes.
    Vacate(Vec<usize>),
}

impl Action {
    /// Whether the action injects a fault (rather than ending one).
    pub fn is_fault(&self) -> bool {
        !matches!(
            self,
            Action::Start(_) | Action::Resume(_) | Action::Heal(_) | Action::Vacate(_)
        )
    }

    /// The kind of action, without its nodes or figures.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Kill(_) => "kill",
            Action::Restart(_) => "restart",
            Action::Start(_) => "start",
            Action::Pause(_) => "pause",
            Action::Resume(_) => "resume",
            Action::BlackHole(_) => "black hole",
            Action::Refuse(_) => "refuse",
            Action::Latency(..) => "latency",
            Action::Heal(_) => "heal",
            Action::ClockRate(_) => "clock rate",
            Action::ClockJump(_) => "clock jump",
            Action::Occupy(..) => "occupy",
            Action::Vacate(_) => "vacate",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |nodes: &[usize]| nodes.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        match self {
            Action::Kill(n) => write!(f, "kill {}", list(n)),
            Action::Restart(n) => write!(f, "restart {}", list(n)),
            Action::Start(n) => write!(f, "start {}", list(n)),
            Action::Pause(n) => write!(f, "pause {}", list(n)),
            Action::Resume(n) => write!(f, "resume {}", list(n)),
            Action::BlackHole(n) => write!(f, "black-hole {}", list(n)),
            Action::Refuse(n) => write!(f, "refuse {}", list(n)),
            Action::Latency(n, d) => write!(f, "latency {d:?} on {}", list(n)),
            Action::Heal(n) => write!(f, "heal {}", list(n)),
            Action::ClockRate(r) => write!(f, "clock rate {r}"),
            Action::ClockJump(ms) => write!(f, "clock jump {ms:+} ms"),
            Action::Occupy(n, key) => write!(f, "occupy {key} on {}", list(n)),
            Action::Vacate(n) => write!(f, "vacate {}", list(n)),
        }
    }
}

/// What the chaos checker runs its contenders against and applies a
/// [`Schedule`]'s actions to: a [`Cluster`] of Redis nodes, or another
/// store's servers (an etcd cluster).
pub trait Target: Send + 'static {
    /// A fault, or its end.
    type Action: Clone + fmt::Display + Send + Sync + 'static;

    /// The node URLs the contenders' clients are built with.
    fn urls(&self) -> Vec<String>;

    /// Whether a fault is in force (acquisitions then count as degraded).
    fn is_degraded(&self) -> bool;

    /// Applies `action`.
    fn apply(&mut self, action: &Self::Action);

    /// Whether `action` injects a fault (rather than ending one).
    fn is_fault(action: &Self::Action) -> bool;

    /// The kind of `action`, without its nodes or figures.
    fn kind(action: &Self::Action) -> &'static str;

    /// Faults in force from the start (fake nodes), counted in the report.
    fn standing_faults(&self) -> usize {
        0
    }
}

impl Target for Cluster {
    type Action = Action;

    fn urls(&self) -> Vec<String> {
        Cluster::urls(self)
    }

    fn is_degraded(&self) -> bool {
        Cluster::is_degraded(self)
    }

    fn apply(&mut self, action: &Action) {
        Cluster::apply(self, action);
    }

    fn is_fault(action: &Action) -> bool {
        action.is_fault()
    }

    fn kind(action: &Action) -> &'static str {
        action.kind()
    }

    fn standing_faults(&self) -> usize {
        self.fakes.len()
    }
}

/// One step of a [`Schedule`].
#[derive(Clone, Debug, PartialEq)]
pub enum Step<A = Action> {
    /// Sleep this long.
    Wait(Duration),
    /// Wait until a contender acquires the lock (after this step began).
    AwaitAcquisition,
    /// Apply an action.
    Do(A),
}

/// A fault script, run step by step while the contenders run: actions on a
/// [`Cluster`] of Redis nodes unless `A` says otherwise.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct Schedule<A = Action> {
    /// The steps, in the order they run.
    pub steps: Vec<Step<A>>,
}

impl<A> Default for Schedule<A> {
    fn default() -> Self {
        Schedule { steps: Vec::new() }
    }
}

impl<A> Schedule<A> {
    /// An empty schedule: the contenders run without faults.
    pub fn new() -> Schedule<A> {
        Schedule::default()
    }

    /// Sleep `duration` before the next step.
    pub fn wait(mut self, duration: Duration) -> Schedule<A> {
        self.steps.push(Step::Wait(duration));
        self
    }

    /// Wait until a contender acquires the lock: the next action then hits a
    /// holder at the start of its critical section.
    pub fn await_acquisition(mut self) -> Schedule<A> {
        self.steps.push(Step::AwaitAcquisition);
        self
    }

    /// Apply `action` now.
    pub fn then(mut self, action: A) -> Schedule<A> {
        self.steps.push(Step::Do(action));
        self
    }

    /// The actions of the schedule.
    pub fn actions(&self) -> impl Iterator<Item = &A> {
        self.steps.iter().filter_map(|s| match s {
            Step::Do(action) => Some(action),
            _ => None,
        })
    }
}
