//! Every safe configuration, explored exhaustively: each property holds in
//! every reachable state, and each reachability check is met (so that a
//! property cannot hold only because the model never got there).

use quorumlock_model::Config;
use quorumlock_model::check::{self, Mode};

/// Nodes in the configurations CI checks.
const NODES: usize = 3;

fn holds(config: Config) {
    let outcome = check::run(config, Mode::Exhaustive);
    println!("{outcome}");
    assert!(outcome.violations.is_empty(), "{outcome}");
    assert!(
        outcome.unreached.is_empty(),
        "the model never reached {:?}\n{outcome}",
        outcome.unreached
    );
    assert!(!outcome.reached.is_empty());
}

#[test]
fn no_faults() {
    holds(Config::base(NODES));
}

#[test]
fn fast_clocks_inside_the_drift_allowance_and_a_lost_message() {
    holds(Config::clocks_and_loss(NODES));
}

#[test]
fn a_crash_with_aof() {
    holds(Config::crash(NODES));
}

#[test]
fn a_paused_node() {
    holds(Config::pause(NODES));
}

#[test]
fn a_crash_without_persistence_and_a_delayed_restart() {
    holds(Config::delayed_restart(NODES));
}

#[test]
fn requests_arriving_after_their_attempt_gave_up() {
    holds(Config::late_requests(NODES));
}

#[test]
fn fencing_tokens_and_fenced_writes_with_a_node_restarted_empty() {
    holds(Config::fenced(NODES));
}

#[test]
fn a_node_beyond_the_drift_allowance_whose_rate_the_clients_know() {
    holds(Config::rogue_measured(NODES));
}

/// Exploring up to renaming of the nodes keeps counterexamples: the
/// exhaustive mode finds the zero-drift overlap too.
#[test]
fn the_reduced_exploration_still_finds_a_violation() {
    let outcome = check::run(Config::no_drift(NODES), Mode::Exhaustive);
    assert!(
        outcome.violation(quorumlock_model::MUTUAL_EXCLUSION).is_some(),
        "{outcome}"
    );
}
