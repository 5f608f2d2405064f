//! The negative controls: each breaks one rule the safety argument rests on,
//! and the checker must find the run that breaks the property that rule
//! protects. A control that finds nothing means the model or the property
//! lost its teeth.

use quorumlock_model::check::{self, Mode};
use quorumlock_model::{Config, FENCING, MUTUAL_EXCLUSION, NO_LEAK, WRITES_IN_ORDER};

const NODES: usize = 3;

/// Runs `config` until `property` breaks; returns the counterexample's steps.
fn breaks(config: Config, property: &'static str) -> Vec<String> {
    let outcome = check::run(config, Mode::Counterexample(property));
    println!("{outcome}");
    let steps = outcome
        .trace(property)
        .unwrap_or_else(|| panic!("no counterexample to {property:?}\n{outcome}"));
    assert!(steps.iter().any(|step| step.starts_with("t=")), "{steps:?}");
    steps
}

#[test]
fn zero_drift_allowance_with_fast_clocks_breaks_mutual_exclusion() {
    let steps = breaks(Config::no_drift(NODES), MUTUAL_EXCLUSION);
    assert!(steps[0].contains("fast clock"), "{steps:?}");
}

#[test]
fn a_bare_majority_with_an_unmeasured_fast_node_breaks_mutual_exclusion() {
    let steps = breaks(Config::rogue_unmeasured(NODES), MUTUAL_EXCLUSION);
    assert!(steps[0].contains("beyond the allowance, unmeasured"), "{steps:?}");
}

#[test]
fn immediate_restart_without_persistence_breaks_mutual_exclusion() {
    let steps = breaks(Config::immediate_restart(NODES), MUTUAL_EXCLUSION);
    assert!(steps.iter().any(|s| s.contains("crashes")) && steps.iter().any(|s| s.contains("restarts")));
}

#[test]
fn a_one_round_incr_fence_issues_a_token_twice_or_out_of_order() {
    breaks(Config::naive_fence(NODES), FENCING);
}

#[test]
fn a_release_without_a_token_check_breaks_mutual_exclusion() {
    breaks(Config::blind_release(NODES), MUTUAL_EXCLUSION);
}

#[test]
fn an_extend_confirmed_by_a_minority_breaks_mutual_exclusion() {
    let steps = breaks(Config::minority_extend(NODES), MUTUAL_EXCLUSION);
    assert!(steps.iter().any(|s| s.contains("renewed")), "{steps:?}");
}

#[test]
fn undoing_only_where_a_grant_was_seen_leaks_keys() {
    breaks(Config::undo_granted_only(NODES), NO_LEAK);
}

#[test]
fn an_unfenced_write_after_a_pause_lands_out_of_order() {
    breaks(Config::unfenced_writes(NODES), WRITES_IN_ORDER);
}
