//! What a run simulates: its nodes, clients, faults, links and workload,
//! and the named scenarios the runner and the tests use.

use std::time::Duration;

use crate::net::Latency;
use crate::workload::Style;

/// The fastest a node's clock may run against simulated time: within the
/// client's default drift allowance (1 % and 2 ms), as safety assumes.
pub const FASTEST_SAFE_RATE: f64 = 1.009;

/// A restart without persistence comes back only after this long: longer
/// than the largest ttl the workload uses, with the drift on top.
pub const EMPTY_RESTART_AFTER: Duration = Duration::from_millis(3_200);

/// The network's usual one-way delay on loopback-like links.
pub const NORMAL_LATENCY: Latency = Latency {
    min: Duration::from_micros(50),
    max: Duration::from_micros(400),
};

/// Which faults a scenario injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultSet {
    /// None: every node and link healthy throughout.
    None,
    /// Node pauses only: connections stay up and requests wait in order,
    /// so work owed to a node is only delayed until it resumes.
    Pauses,
    /// Every fault of this module.
    All,
}

/// The rate of the fast node in the `fast` scenario: a key set for a ttl
/// lives two thirds of it there.
const FAST_NODE_RATE: f64 = 1.5;

/// The calm scenario's links: delays spread widely enough that two clients'
/// requests reach the nodes in different orders, so that attempts split
/// the votes and must undo what they got.
const JITTERY_LATENCY: Latency = Latency {
    min: Duration::from_micros(50),
    max: Duration::from_millis(6),
};

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
    /// Only these faults (by the order drawn), when shrinking a failing run.
    pub kept_faults: Option<Vec<usize>>,
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
            kept_faults: None,
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
