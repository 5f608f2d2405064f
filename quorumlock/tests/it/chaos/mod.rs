//! Chaos scenarios: contenders hold one lock over three real redis-server
//! nodes while nodes crash, pause, drop off the network, slow down, run on
//! skewed clocks or speak garbage, and the checker looks for two holders
//! inside at once (see `quorumlock_testkit::checker`).
//!
//! Each test asserts the property its name states and prints a report row
//! (`cargo test -p quorumlock --test it chaos:: -- --skip redis_cluster::
//! --nocapture` shows them; docs/reliability.md collects them). The
//! `*_detects_overlap` tests run conditions the library cannot make safe
//! and assert that the checker sees the overlap, so that a zero elsewhere
//! means something.
//!
//! One concern per module: `minority_faults`, `majority_outages`,
//! `clock_skew`, `known_unsafe` (the controls, and the checker's own
//! overlap rule) and `broken_nodes`.
//!
//! Environment:
//! - `QUORUMLOCK_CHAOS_SEED=<u64>`: every scenario prints its seed at the
//!   start; setting it makes a rerun take the same random choices (fault
//!   timing, chosen nodes, contender jitter). The interleaving with real
//!   servers still varies from run to run.
//! - `QUORUMLOCK_CHAOS_SOAK=1`: long schedules (ten to forty times the
//!   fault cycles or fault time of the default run) with twice the
//!   contenders and short holds (see `quorumlock_testkit::checker::SOAK_HOLD`),
//!   for many acquisitions while faults are in force: about eleven minutes
//!   for the suite on a 2-core machine (three and a half of them for the
//!   fast-clock scenario), against about half a minute.

mod broken_nodes;
mod clock_skew;
mod known_unsafe;
mod majority_outages;
mod minority_faults;

use std::time::Duration;

use quorumlock::{DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED};
use quorumlock_testkit::checker::Checker;
use rand::RngExt;

/// Nodes of every scenario.
const NODES: usize = 3;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The library's default drift allowance for `ttl`.
fn default_drift(ttl: Duration) -> Duration {
    ttl.mul_f64(DEFAULT_DRIFT_FACTOR) + DEFAULT_DRIFT_FIXED
}

/// Two of the three nodes, chosen at random: a majority.
fn majority(checker: &mut Checker) -> Vec<usize> {
    let spared = checker.rng().random_range(0..NODES);
    (0..NODES).filter(|&i| i != spared).collect()
}
