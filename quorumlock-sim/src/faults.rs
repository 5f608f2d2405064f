//! Random fault schedules within the safe configurations (docs/safety.md,
//! "Assumptions"): the network may delay, cut, black-hole and reset; nodes
//! may pause for any time and crash, coming back with their keys
//! (persistence) or only after the largest ttl (a delayed restart); a
//! node's clock may run fast within the drift allowance. Each fault ends
//! after a while, so that the run can settle and its end be checked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::history::History;
use crate::net::{Latency, Network};
use crate::nodes::Nodes;
use crate::scenario::{EMPTY_RESTART_AFTER, FaultSet, NORMAL_LATENCY};

/// The longest a fault other than an empty restart lasts.
const FAULT_MAX: Duration = Duration::from_millis(2_500);

/// A slow link's one-way delay.
const SLOW_LATENCY: Latency = Latency {
    min: Duration::from_millis(2),
    max: Duration::from_millis(40),
};

/// One fault, on what it acts.
#[derive(Clone, Debug)]
enum Fault {
    Slow { client: usize, node: String },
    Partition { client: usize, node: String },
    BlackHole { node: String },
    Reset { node: String },
    Pause { node: String },
    Crash { node: usize, persistence: bool },
}

/// Where the faults act, and where they are recorded.
#[derive(Clone)]
pub struct Targets {
    pub net: Network,
    pub nodes: Nodes,
    pub clients: usize,
    pub history: Arc<Mutex<History>>,
}

/// Injects faults at random moments until `end`, then heals everything;
/// records each in the history from its start to its end. With `kept`,
/// only the faults of those indices (in the order drawn) are injected; the
/// others are drawn all the same, so that the kept ones stay as they were.
pub async fn inject(seed: u64, set: FaultSet, kept: Option<&[usize]>, targets: Targets, end: Instant) {
    let Targets { nodes, clients, .. } = targets.clone();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut drawn = 0;
    while Instant::now() < end {
        let gap = Duration::from_millis(rng.random_range(50..1_500));
        tokio::time::sleep(gap).await;
        if Instant::now() >= end {
            break;
        }
        let fault = match set {
            FaultSet::None => return,
            FaultSet::Pauses => Fault::Pause {
                node: nodes.address(rng.random_range(0..nodes.len())),
            },
            FaultSet::All => pick(&mut rng, &nodes, clients),
        };
        let lasts = match fault {
            Fault::Crash {
                persistence: false, ..
            } => EMPTY_RESTART_AFTER,
            _ => Duration::from_millis(rng.random_range(1..=FAULT_MAX.as_millis() as u64)),
        };
        let index = drawn;
        drawn += 1;
        if kept.is_some_and(|kept| !kept.contains(&index)) {
            continue;
        }
        tracing::debug!(index, ?fault, ?lasts, "fault");
        let span = record(&fault, index, &targets);
        start(&fault, &targets.net, &nodes);
        let targets = targets.clone();
        tokio::spawn(async move {
            tokio::time::sleep(lasts).await;
            stop(&fault, &targets.net, &targets.nodes);
            lock(&targets.history).fault_ended(span);
        });
    }
}

fn pick(rng: &mut StdRng, nodes: &Nodes, clients: usize) -> Fault {
    let node = rng.random_range(0..nodes.len());
    let address = nodes.address(node);
    let client = rng.random_range(0..clients);
    match rng.random_range(0..6) {
        0 => Fault::Slow {
            client,
            node: address,
        },
        1 => Fault::Partition {
            client,
            node: address,
        },
        2 => Fault::BlackHole { node: address },
        3 => Fault::Reset { node: address },
        4 => Fault::Pause { node: address },
        _ => Fault::Crash {
            node,
            persistence: rng.random_bool(0.7),
        },
    }
}

fn lock(history: &Mutex<History>) -> std::sync::MutexGuard<'_, History> {
    history.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records the start of `fault` (the `index`th drawn) in the history;
/// its index there.
fn record(fault: &Fault, index: usize, targets: &Targets) -> usize {
    let (node, client) = match fault {
        Fault::Slow { client, node } | Fault::Partition { client, node } => (node.clone(), Some(*client)),
        Fault::BlackHole { node } | Fault::Reset { node } | Fault::Pause { node } => (node.clone(), None),
        Fault::Crash { node, .. } => (targets.nodes.address(*node), None),
    };
    lock(&targets.history).fault_started(node, client, (format!("{fault:?}"), Some(index)))
}

/// A client's host on the network.
pub fn host(client: usize) -> String {
    format!("c{client}")
}

fn start(fault: &Fault, net: &Network, nodes: &Nodes) {
    match fault {
        Fault::Slow { client, node } => net.set_latency(&host(*client), node, SLOW_LATENCY),
        Fault::Partition { client, node } => net.partition(&host(*client), node),
        Fault::BlackHole { node } => net.black_hole(node),
        Fault::Reset { node } => net.reset_connections(node),
        Fault::Pause { node } => nodes.by_address(node).pause(),
        Fault::Crash { node, persistence } => nodes.crash(*node, *persistence),
    }
}

fn stop(fault: &Fault, net: &Network, nodes: &Nodes) {
    match fault {
        Fault::Slow { client, node } => net.set_latency(&host(*client), node, NORMAL_LATENCY),
        Fault::Partition { client, node } => net.heal(&host(*client), node),
        Fault::BlackHole { node } => net.unblack_hole(node),
        Fault::Reset { .. } => {}
        Fault::Pause { node } => nodes.resume(node),
        Fault::Crash { node, .. } => nodes.restart(*node),
    }
}
