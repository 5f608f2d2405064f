//! The simulated nodes of a run, each listening on the network while it
//! is up: crashes and restarts (no earlier than a delayed restart allows),
//! pauses, and what the checks read off them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use rand::rngs::StdRng;
use tokio::time::Instant;

use crate::net::Network;
use crate::node::{NodeClock, SimNode};
use crate::scenario::Scenario;
use crate::scenario::{EMPTY_RESTART_AFTER, FASTEST_SAFE_RATE};
use crate::violation::Violation;
use crate::workload::lock_keys;

/// How far a node's clock may be set from the simulation's wall clock, in
/// ms either way: the client learns the nodes' time for its fence
/// proposals, so it must cope with clocks that are off.
const NODE_OFFSET_MS: i64 = 5_000;

/// How far apart two acquisitions must be for fence order to hold once a
/// node lost its fences: more than any two nodes' clocks disagree (twice
/// the offset, and what the rates within the drift allowance add over a
/// run of a minute).
pub const FENCE_GAP_AFTER_DATA_LOSS: Duration = Duration::from_secs(12);

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
    /// It restarted without its keys and fences at least once.
    lost_data: bool,
}

impl Nodes {
    pub(crate) fn start(
        net: &Network,
        rng: &mut StdRng,
        scenario: &Scenario,
        (start, epoch): (Instant, Duration),
    ) -> Nodes {
        let count = scenario.nodes;
        let epoch_ms = u64::try_from(epoch.as_millis()).unwrap_or(u64::MAX);
        let slots = (0..count)
            .map(|i| {
                let mut clock = NodeClock {
                    offset_ms: rng.random_range(-NODE_OFFSET_MS..NODE_OFFSET_MS),
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
                    lost_data: false,
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

    pub(crate) fn urls(&self) -> Vec<String> {
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

    /// Whether any node restarted without its keys and fences.
    pub fn lost_data(&self) -> bool {
        self.slots().iter().any(|s| s.lost_data)
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
            slot.empty_until = Instant::now() + EMPTY_RESTART_AFTER;
            slot.lost_data = true;
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
    pub fn lock_keys(&self) -> Vec<(String, String, String)> {
        let resources = lock_keys();
        let slots = self.slots();
        let mut keys = Vec::new();
        for slot in slots.iter().filter(|s| s.up && !s.node.is_paused()) {
            for (key, value) in slot.node.live_keys() {
                if resources.contains(&key) {
                    keys.push((slot.address.clone(), key, value));
                }
            }
        }
        keys
    }

    /// Lock keys (a resource's own key) still on a node.
    pub(crate) fn leftovers(&self) -> Vec<Violation> {
        let resources = lock_keys();
        let slots = self.slots();
        let mut found = Vec::new();
        for slot in slots.iter() {
            for (key, value) in slot.node.live_keys() {
                if resources.contains(&key) {
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
