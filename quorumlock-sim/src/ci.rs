//! The seed range `scripts/test.sh` runs: each seed's run must find no
//! violation, and a run replayed from its seed must be the same run.

use crate::{Scenario, run};

/// Seeds of the standard scenario run in every test run (more with
/// `QUORUMLOCK_SIM_SEEDS`).
const CI_SEEDS: u64 = 40;

fn seeds() -> u64 {
    std::env::var("QUORUMLOCK_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CI_SEEDS)
}

#[test]
fn the_standard_scenario_keeps_every_property() {
    let scenario = Scenario::standard();
    for seed in 0..seeds() {
        let outcome = run(seed, &scenario);
        assert!(
            outcome.violations.is_empty(),
            "seed {seed}: {:#?}\nreplay: cargo run --release -p quorumlock-sim -- --seeds {seed} --scenario standard",
            outcome.violations
        );
        assert!(outcome.holds > 0, "seed {seed}: no lock was ever granted");
    }
}

/// Seeds that found a bug: the scenario, the seed and what it found.
const REGRESSIONS: [(&str, u64, &str); 3] = [
    (
        "standard",
        23,
        "a broken connection's failed batch reply queued for the connection's lock \
         behind the batcher's next hand-over: every later request to the node waited for good",
    ),
    (
        "standard",
        8,
        "a connection the node had closed while it sat idle failed the next request \
         without sending it: the node counted as failed, and attempts reported the \
         nodes unreachable while every node was up",
    ),
    (
        "fast",
        115,
        "a fence proposal that one node refused and two could not answer before the \
         validity ran out reported the nodes unreachable, though the failures alone \
         left a majority (now: validity used up, or held when time was left)",
    ),
];

#[test]
fn the_seeds_that_found_bugs_stay_fixed() {
    for (name, seed, found) in REGRESSIONS {
        let scenario = Scenario::named(name).expect("a named scenario");
        let outcome = run(seed, &scenario);
        assert!(
            outcome.violations.is_empty(),
            "{name} seed {seed} ({found}): {:#?}",
            outcome.violations
        );
    }
}

#[test]
fn without_faults_no_key_is_left_behind() {
    let scenario = Scenario::named("calm").expect("a named scenario");
    for seed in 0..seeds() / 4 {
        let outcome = run(seed, &scenario);
        assert!(
            outcome.violations.is_empty(),
            "seed {seed}: {:#?}",
            outcome.violations
        );
    }
}

#[test]
fn a_seed_replays_the_same_run() {
    let scenario = Scenario::named("short").expect("a named scenario");
    for seed in 0..5 {
        assert_eq!(
            run(seed, &scenario).trace,
            run(seed, &scenario).trace,
            "seed {seed}"
        );
    }
}
