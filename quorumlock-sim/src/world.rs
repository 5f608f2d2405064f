//! One simulated run: nodes, network, clients and faults on one
//! current-thread runtime with the paused clock, every choice drawn from
//! the run's seed; then the checks.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use quorumlock::sim::{Dialer, Stream};
use quorumlock::{LockOptions, Redlock};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;
use tracing::Instrument;

use crate::audit;
use crate::faults::{self, FASTEST_SAFE_RATE, FaultSet, NORMAL_LATENCY};
use crate::history::{History, Violation};
use crate::net::{Latency, Network};
use crate::node::{NodeClock, SimNode};
use crate::workload::{Client, RESOURCES, Style};

/// The wall clock at a run's start, as the client and the nodes read it:
/// fixed, so that a run is the same whenever it is replayed.
const EPOCH: Duration = Duration::from_secs(1_800_000_000);

/// How long the end of a run waits, after every fault healed, for work in
/// flight (renewals, releases in the background) before the clients shut
/// down.
const SETTLE: Duration = Duration::from_secs(4);

/// The rate of the fast node in the `fast` scenario: a key set for a ttl
/// lives two thirds of it there.
const FAST_NODE_RATE: f64 = 1.5;

/// How long each client may wait for a lock once the faults healed: the
/// clients hand it on one after another, each within a few round trips.
const SERVED_WITHIN: Duration = Duration::from_secs(10);

/// The ttl of the locks taken once the faults healed.
const SERVED_TTL: Duration = Duration::from_millis(500);

/// The calm scenario's links: delays spread widely enough that two clients'
/// requests reach the nodes in different orders, so that attempts split
/// the votes and must undo what they got.
const JITTERY_LATENCY: Latency = Latency {
    min: Duration::from_micros(50),
    max: Duration::from_millis(6),
};

/// What a client's shutdown may take.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The per-node timeout the clients use: a few slow round trips.
const NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub nodes: usize,
    pub clients: usize,
    /// Tasks per client, taking locks at once through the client.
    pub workers: usize,
    /// Simulated time the workload runs for.
    pub duration: Duration,
    /// Which faults are injected.
    pub faults: FaultSet,
    /// The one-way delay of every link.
    pub latency: Latency,
    /// The rate of node 0's clock, when it runs fast beyond the drift
    /// allowance (which the client guards once it has read the rate).
    pub fast_node: Option<f64>,
    /// The rate of every node's clock, when not drawn at random.
    pub node_rate: Option<f64>,
    pub style: Style,
}

impl Scenario {
    /// The standard scenario: 5 nodes, 4 clients, 30 s, faults.
    pub fn standard() -> Self {
        Scenario {
            nodes: 5,
            clients: 4,
            workers: 1,
            duration: Duration::from_secs(30),
            faults: FaultSet::All,
            latency: NORMAL_LATENCY,
            fast_node: None,
            node_rate: None,
            style: Style::Mixed,
        }
    }

    /// A named scenario (`standard`, `calm`: no faults and links of widely
    /// spread delays, `short`: 3 nodes, 3 clients, 5 s with faults, `busy`:
    /// node pauses only, 3 nodes, 2 clients of 16 tasks each, 10 s (the
    /// clients batch), `expiry`: 3 nodes whose
    /// clocks run as fast as the drift allowance covers, 3 clients racing for
    /// one long lock held to the end of its validity (`Style::Expiry`),
    /// `fast`: faults and node 0's clock 1.5 times fast).
    pub fn named(name: &str) -> Option<Self> {
        let standard = Scenario::standard();
        match name {
            "standard" => Some(standard),
            "calm" => Some(Scenario {
                faults: FaultSet::None,
                latency: JITTERY_LATENCY,
                ..standard
            }),
            "short" => Some(Scenario {
                nodes: 3,
                clients: 3,
                workers: 1,
                duration: Duration::from_secs(5),
                faults: FaultSet::All,
                ..standard.clone()
            }),
            "busy" => Some(Scenario {
                nodes: 3,
                clients: 2,
                workers: 16,
                duration: Duration::from_secs(10),
                faults: FaultSet::Pauses,
                ..standard.clone()
            }),
            "expiry" => Some(Scenario {
                nodes: 3,
                clients: 3,
                duration: Duration::from_secs(1),
                faults: FaultSet::None,
                node_rate: Some(FASTEST_SAFE_RATE),
                style: Style::Expiry,
                ..standard.clone()
            }),
            "fast" => Some(Scenario {
                fast_node: Some(FAST_NODE_RATE),
                ..standard
            }),
            _ => None,
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    pub violations: Vec<Violation>,
    /// A hash of everything that happened: equal for two runs of one seed.
    pub trace: u64,
    pub holds: usize,
    pub steps: usize,
    pub refused: u64,
    pub errors: Vec<(String, u64)>,
}

thread_local! {
    /// When the run on this thread started, for [`SimTime`].
    static RUN_START: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// Stamps log lines with the simulated time since the run started.
pub struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match RUN_START.get() {
            Some(start) => write!(w, "{:>11.6}s", start.elapsed().as_secs_f64()),
            None => write!(w, "{:>12}", "-"),
        }
    }
}

/// Runs `scenario` from `seed`.
pub fn run(seed: u64, scenario: &Scenario) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(simulate(seed, scenario))
}

async fn simulate(seed: u64, scenario: &Scenario) -> Outcome {
    let _entered = quorumlock::sim::enter(seed, EPOCH);
    let mut rng = StdRng::seed_from_u64(seed);
    let net = Network::new(rng.random(), scenario.latency);
    let start = Instant::now();
    RUN_START.set(Some(start));
    let nodes = Nodes::start(&net, &mut rng, scenario, start);
    let history = Arc::new(Mutex::new(History::new(start)));
    let end = start + scenario.duration;
    let mut clients = Vec::new();
    for id in 0..scenario.clients {
        let dialer = Arc::new(NetDialer {
            net: net.clone(),
            host: format!("c{id}"),
        });
        let redlock = Redlock::builder()
            .nodes(nodes.urls())
            .node_timeout(NODE_TIMEOUT)
            .dialer(dialer)
            .build()
            .expect("the simulated clients' settings are valid");
        for worker in 0..scenario.workers {
            let client = Client::new(
                id,
                redlock.clone(),
                rng.random(),
                Arc::clone(&history),
                (end, scenario.style),
            );
            let span = tracing::info_span!("client", id, worker);
            clients.push(tokio::spawn(client.run().instrument(span)));
        }
    }
    if scenario.faults != FaultSet::None {
        tokio::spawn(faults::inject(
            rng.random(),
            scenario.faults,
            net.clone(),
            nodes.clone(),
            scenario.clients,
            end,
        ));
    }
    let stop_audit = Arc::new(AtomicBool::new(false));
    let audit = (scenario.faults != FaultSet::All).then(|| {
        tokio::spawn(audit::audit(
            nodes.clone(),
            Arc::clone(&history),
            Arc::clone(&stop_audit),
        ))
    });
    // One handle per client (its workers share it) for the shutdown.
    let mut redlocks = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let redlock = client.await.expect("a client's task panicked");
        if i % scenario.workers == 0 {
            redlocks.push(redlock);
        }
    }
    stop_audit.store(true, Ordering::Relaxed);
    let mut violations = match audit {
        Some(audit) => audit.await.expect("the auditor panicked"),
        None => Vec::new(),
    };
    // Every fault has healed once its own time is up; then the work in
    // flight settles, and the clients shut down.
    tokio::time::sleep(SETTLE).await;
    violations.extend(served_after_healing(&redlocks).await);
    for (client, redlock) in redlocks.iter().enumerate() {
        let report = redlock.shutdown(SHUTDOWN_TIMEOUT).await;
        if !report.is_complete() {
            violations.push(Violation::Shutdown {
                client,
                report: report.to_string(),
            });
        }
    }
    let history = history.lock().unwrap_or_else(|e| e.into_inner());
    violations.extend(history.check());
    if scenario.faults == FaultSet::None {
        violations.extend(nodes.leftovers());
        if let Some(count) = history.errors.get("Unreachable") {
            violations.push(Violation::FalseUnreachable { count: *count });
        }
    }
    Outcome {
        violations,
        trace: trace(&history, net.trace_hash()),
        holds: history.holds.len(),
        steps: history.steps.len(),
        refused: history.refused,
        errors: history.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    }
}

/// Every client, all at once, waits for one lock once the faults have
/// healed: each must get it within [`SERVED_WITHIN`] (liveness).
async fn served_after_healing(redlocks: &[Redlock]) -> Vec<Violation> {
    let waits = redlocks.iter().enumerate().map(|(client, redlock)| async move {
        let options = LockOptions::new().wait(SERVED_WITHIN);
        let outcome = match redlock.with_options(options) {
            Ok(waiter) => waiter.lock(RESOURCES[0], SERVED_TTL).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(guard) => {
                let _ = guard.release().await;
                None
            }
            Err(error) => Some(Violation::NotServed {
                client,
                error: error.to_string(),
            }),
        }
    });
    futures::future::join_all(waits)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// A hash of the run's history and network trace (FNV-1a: the same on
/// every run and platform, unlike std's keyed hashers).
fn trace(history: &History, network: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(&network.to_le_bytes());
    for hold in &history.holds {
        feed(format!("{hold:?}").as_bytes());
    }
    for step in &history.steps {
        feed(format!("{step:?}").as_bytes());
    }
    hash
}

/// A client's connections, through the simulated network from its host.
struct NetDialer {
    net: Network,
    host: String,
}

impl Dialer for NetDialer {
    fn dial(&self, address: &str) -> BoxFuture<'static, io::Result<Stream>> {
        let (net, host, address) = (self.net.clone(), self.host.clone(), address.to_owned());
        Box::pin(async move {
            tracing::debug!(%host, %address, "dial");
            let stream = net.connect(&host, &address).await;
            tracing::debug!(%host, %address, ok = stream.is_ok(), "dialed");
            Ok(Box::pin(stream?) as Stream)
        })
    }
}

/// The simulated nodes, each listening on the network while it is up.
#[derive(Clone)]
pub struct Nodes(Arc<Mutex<Vec<Slot>>>, Network);

struct Slot {
    node: SimNode,
    address: String,
    up: bool,
    /// A node that lost its keys may come back only after this instant
    /// (safety's delayed restart).
    empty_until: Instant,
    /// When the node last resumed from a pause: work owed to it could not
    /// be done before.
    resumed_at: Instant,
}

impl Nodes {
    fn start(net: &Network, rng: &mut StdRng, scenario: &Scenario, start: Instant) -> Nodes {
        let count = scenario.nodes;
        let epoch_ms = u64::try_from(EPOCH.as_millis()).unwrap_or(u64::MAX);
        let slots = (0..count)
            .map(|i| {
                let mut clock = NodeClock {
                    offset_ms: rng.random_range(-5_000..5_000),
                    rate: rng.random_range(1.0 / FASTEST_SAFE_RATE..FASTEST_SAFE_RATE),
                };
                if let Some(rate) = scenario.node_rate {
                    clock.rate = rate;
                }
                if let (0, Some(rate)) = (i, scenario.fast_node) {
                    clock.rate = rate;
                }
                let address = format!("n{i}:6379");
                Slot {
                    node: SimNode::new(&address, epoch_ms, start, clock),
                    address,
                    up: false,
                    empty_until: start,
                    resumed_at: start,
                }
            })
            .collect();
        let nodes = Nodes(Arc::new(Mutex::new(slots)), net.clone());
        for i in 0..count {
            nodes.restart(i);
        }
        nodes
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.slots().len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots().is_empty()
    }

    pub fn address(&self, i: usize) -> String {
        self.slots()[i].address.clone()
    }

    fn urls(&self) -> Vec<String> {
        self.slots()
            .iter()
            .map(|s| format!("redis://{}", s.address))
            .collect()
    }

    pub fn by_address(&self, address: &str) -> SimNode {
        let slots = self.slots();
        let slot = slots
            .iter()
            .find(|s| s.address == address)
            .expect("a node's own address");
        slot.node.clone()
    }

    /// Resumes the paused node at `address`.
    pub fn resume(&self, address: &str) {
        let mut slots = self.slots();
        if let Some(slot) = slots.iter_mut().find(|s| s.address == address) {
            slot.node.resume();
            slot.resumed_at = Instant::now();
        }
    }

    /// When the node at `address` last resumed from a pause.
    pub fn resumed_at(&self, address: &str) -> Option<Instant> {
        self.slots()
            .iter()
            .find(|s| s.address == address)
            .map(|s| s.resumed_at)
    }

    /// Crashes node `i` (if up): its connections break, new ones are
    /// refused until it restarts.
    pub fn crash(&self, i: usize, persistence: bool) {
        let mut slots = self.slots();
        let slot = &mut slots[i];
        if !slot.up {
            return;
        }
        slot.up = false;
        slot.node.crash(persistence);
        self.1.close_listener(&slot.address);
        self.1.reset_connections(&slot.address);
        if !persistence {
            slot.empty_until = Instant::now() + faults::EMPTY_RESTART_AFTER;
        }
    }

    /// Brings node `i` back (if down), no earlier than a delayed restart
    /// allows.
    pub fn restart(&self, i: usize) {
        let wait = {
            let slots = self.slots();
            slots[i].empty_until.saturating_duration_since(Instant::now())
        };
        let nodes = self.clone();
        if !wait.is_zero() {
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                nodes.restart(i);
            });
            return;
        }
        let mut slots = self.slots();
        let slot = &mut slots[i];
        if slot.up {
            return;
        }
        slot.up = true;
        let mut listener = self.1.listen(&slot.address);
        let node = slot.node.clone();
        tokio::spawn(async move {
            while let Some(stream) = listener.accept().await {
                tokio::spawn({
                    let node = node.clone();
                    async move { node.serve(stream).await }
                });
            }
        });
    }

    /// Every lock key on a node that is up and not paused: (node, key,
    /// token).
    pub fn lock_keys(&self, resources: &[&str]) -> Vec<(String, String, String)> {
        let slots = self.slots();
        let mut keys = Vec::new();
        for slot in slots.iter().filter(|s| s.up && !s.node.is_paused()) {
            for (key, value) in slot.node.live_keys() {
                if resources.contains(&key.as_str()) {
                    keys.push((slot.address.clone(), key, value));
                }
            }
        }
        keys
    }

    /// Lock keys (a resource's own key) still on a node.
    fn leftovers(&self) -> Vec<Violation> {
        let slots = self.slots();
        let mut found = Vec::new();
        for slot in slots.iter() {
            for (key, value) in slot.node.live_keys() {
                if RESOURCES.contains(&key.as_str()) {
                    found.push(Violation::Leftover {
                        node: slot.address.clone(),
                        key,
                        value,
                    });
                }
            }
        }
        found
    }
}
