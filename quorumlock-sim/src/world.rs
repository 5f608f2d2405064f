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
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::audit;
use crate::faults;
use crate::history::History;
use crate::net::Network;
use crate::nodes::{FENCE_GAP_AFTER_DATA_LOSS, Nodes};
use crate::outages::{self, FaultSpan};
use crate::scenario::FaultSet;
use crate::scenario::Scenario;
use crate::violation::Violation;
use crate::workload::{Client, POOL, RESOURCES};

/// The wall clock at a run's start, as the client and the nodes read it:
/// fixed, so that a run is the same whenever it is replayed.
const EPOCH: Duration = Duration::from_secs(1_800_000_000);

/// How long the end of a run waits, after every fault healed, for work in
/// flight (renewals, releases in the background) before the clients shut
/// down.
const SETTLE: Duration = Duration::from_secs(4);

/// How long each client may wait for a lock once the faults healed: the
/// clients hand it on one after another, each within a few round trips.
const SERVED_WITHIN: Duration = Duration::from_secs(10);

/// The ttl of the locks taken once the faults healed.
const SERVED_TTL: Duration = Duration::from_millis(500);
/// What a client's shutdown may take.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// The per-node timeout the clients use: a few slow round trips.
const NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// What a run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub violations: Vec<Violation>,
    /// The faults injected, from when to when.
    pub faults: Vec<FaultSpan>,
    /// A hash of everything that happened: equal for two runs of one seed.
    pub trace: u64,
    pub holds: usize,
    /// Of the holds, those of a semaphore's permit.
    pub permits: usize,
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
    let nodes = Nodes::start(&net, &mut rng, scenario, (start, EPOCH));
    let mut history = History::new(start);
    if scenario.fast_node.is_some() {
        // Node 0's clock runs too fast throughout: a fault that clients
        // find and guard against by counting the node as failed.
        let what = "node 0's clock runs fast".to_owned();
        history.fault_started(nodes.address(0), None, (what, None));
    }
    let history = Arc::new(Mutex::new(history));
    let end = start + scenario.duration;
    let clients = start_clients(scenario, &net, &nodes, &history, (&mut rng, end));
    if scenario.faults != FaultSet::None {
        let targets = faults::Targets {
            net: net.clone(),
            nodes: nodes.clone(),
            clients: scenario.clients,
            history: Arc::clone(&history),
        };
        let (seed, set, kept) = (rng.random(), scenario.faults, scenario.kept_faults.clone());
        tokio::spawn(async move { faults::inject(seed, set, kept.as_deref(), targets, end).await });
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
    violations.extend(shut_down(&redlocks).await);
    let history = history.lock().unwrap_or_else(|e| e.into_inner());
    let fence_gap = if nodes.lost_data() {
        FENCE_GAP_AFTER_DATA_LOSS
    } else {
        Duration::ZERO
    };
    violations.extend(history.check(fence_gap));
    violations.extend(outages::unjustified(&history.outages, &history.faults));
    if scenario.faults == FaultSet::None {
        violations.extend(nodes.leftovers());
    }
    Outcome {
        violations,
        faults: history.faults.clone(),
        trace: trace(&history, net.trace_hash()),
        holds: history.holds.len(),
        permits: permits(&history),
        steps: history.steps.len(),
        refused: history.refused,
        errors: history.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    }
}

/// How many of the holds in `history` were permits of the pool.
fn permits(history: &History) -> usize {
    // A permit's key carries its semaphore's name as its hash tag.
    let pool_tag = format!("{{{POOL}}}");
    history
        .holds
        .iter()
        .filter(|h| h.resources.iter().any(|r| r.starts_with(&pool_tag)))
        .count()
}

/// Builds the clients and starts their workers (see [`Client`]), each
/// client's connections through the network from its own host.
fn start_clients(
    scenario: &Scenario,
    net: &Network,
    nodes: &Nodes,
    history: &Arc<Mutex<History>>,
    (rng, end): (&mut StdRng, Instant),
) -> Vec<JoinHandle<Redlock>> {
    let mut clients = Vec::new();
    for id in 0..scenario.clients {
        let dialer = Arc::new(NetDialer {
            net: net.clone(),
            host: faults::host(id),
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
                Arc::clone(history),
                (end, scenario.style),
            );
            let span = tracing::info_span!("client", id, worker);
            clients.push(tokio::spawn(client.run().instrument(span)));
        }
    }
    clients
}

/// Shuts every client down: each must finish its work.
async fn shut_down(redlocks: &[Redlock]) -> Vec<Violation> {
    let mut found = Vec::new();
    for (client, redlock) in redlocks.iter().enumerate() {
        let report = redlock.shutdown(SHUTDOWN_TIMEOUT).await;
        if !report.is_complete() {
            found.push(Violation::Shutdown {
                client,
                report: report.to_string(),
            });
        }
    }
    found
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
