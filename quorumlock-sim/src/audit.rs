//! The keys on the nodes, audited while a run without faults goes on: with
//! every node and link healthy, a given-back lock's keys are gone within a
//! few round trips (a release confirmed by a majority finishes on the others
//! in the background), and so are a refused attempt's (its undo). A key that
//! outlives [`GRACE`] is work the library failed to do or did out of order.
//! A paused node does nothing, so its keys are timed from when it resumed
//! (the node must not be paused now: it is then not audited).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::history::History;
use crate::nodes::Nodes;
use crate::violation::Violation;

/// How often the auditor looks.
const EVERY: Duration = Duration::from_millis(25);

/// How long a key may outlive its lock with no fault: several node timeouts
/// (a release's background part, an undo after an attempt's deadline),
/// far below the shortest ttl the workload uses but one.
const GRACE: Duration = Duration::from_millis(250);

/// Audits the nodes' lock keys until `stop` is set; returns what it found.
pub async fn audit(nodes: Nodes, history: Arc<Mutex<History>>, stop: Arc<AtomicBool>) -> Vec<Violation> {
    // (node, key, token) -> when first seen without a live hold.
    let mut orphans: BTreeMap<(String, String, String), Duration> = BTreeMap::new();
    let mut found = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(EVERY).await;
        let history = history.lock().unwrap_or_else(|e| e.into_inner());
        let now = history.now();
        let mut seen = BTreeMap::new();
        for (node, key, token) in nodes.lock_keys() {
            let since = match history.by_token(&token) {
                Some(hold) => match hold.given_back {
                    Some(at) => at,
                    None => continue,
                },
                None => *orphans
                    .get(&(node.clone(), key.clone(), token.clone()))
                    .unwrap_or(&now),
            };
            // Work owed to a paused node waits for it to resume.
            let resumed = nodes
                .resumed_at(&node)
                .map_or(Duration::ZERO, |at| history.since_start(at));
            let age = now.saturating_sub(since.max(resumed));
            if age > GRACE {
                let whose = match history.by_token(&token) {
                    Some(hold) => format!(
                        "client {}'s given-back lock (token {})",
                        hold.client,
                        short(&token)
                    ),
                    None => format!("an attempt that never held (token {})", short(&token)),
                };
                let violation = Violation::Stale {
                    node: node.clone(),
                    key: key.clone(),
                    whose,
                    for_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                };
                if !found.iter().any(|v: &Violation| same_key(v, &violation)) {
                    found.push(violation);
                }
            }
            seen.insert((node, key, token), since);
        }
        orphans = seen;
    }
    found
}

fn short(token: &str) -> &str {
    &token[..8.min(token.len())]
}

/// One report per stale key, not one per look.
fn same_key(a: &Violation, b: &Violation) -> bool {
    matches!((a, b), (
        Violation::Stale { node: n1, key: k1, whose: w1, .. },
        Violation::Stale { node: n2, key: k2, whose: w2, .. },
    ) if n1 == n2 && k1 == k2 && w1 == w2)
}
