//! The model checker from the command line: the safe configurations
//! explored exhaustively and the negative controls, printing states
//! explored, time and every counterexample's steps.
//!
//! ```text
//! cargo run -p quorumlock-model --release                      # what CI checks, N = 3
//! cargo run -p quorumlock-model --release -- --nodes 5         # the same with five nodes
//! cargo run -p quorumlock-model --release -- --deeper          # two attempts per client, a later horizon, every fault at once
//! cargo run -p quorumlock-model --release -- --only fenced     # configurations whose name contains "fenced"
//! ```

use std::time::Instant;

use quorumlock_model::check::{self, Mode};
use quorumlock_model::{Config, controls};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let nodes = match value("--nodes").map(|n| n.parse::<usize>()) {
        None => 3,
        Some(Ok(n)) if (1..=7).contains(&n) => n,
        Some(_) => usage("--nodes takes a number from 1 to 7"),
    };
    let only = value("--only");
    let deeper = args.iter().any(|a| a == "--deeper");
    let controls_only = args.iter().any(|a| a == "--controls");
    let selected = |config: &Config| only.is_none_or(|name| config.name.contains(name.as_str()));

    let started = Instant::now();
    let mut failed = false;
    if !controls_only {
        let mut safe = Config::all_safe(nodes);
        if deeper {
            safe = safe.into_iter().map(Config::deeper).collect();
            safe.push(Config::all_faults(nodes));
        }
        for config in safe.into_iter().filter(selected) {
            let outcome = check::run(config, Mode::Exhaustive);
            print!("{outcome}");
            failed |= !outcome.violations.is_empty() || !outcome.unreached.is_empty();
        }
    }
    for (config, property) in controls(nodes).into_iter().filter(|(config, _)| selected(config)) {
        let outcome = check::run(config, Mode::Counterexample(property));
        print!("{outcome}");
        if outcome.violation(property).is_none() {
            println!("  CONTROL FAILED: no counterexample to {property:?}");
            failed = true;
        }
    }
    println!("all runs: {:.2?}", started.elapsed());
    if failed {
        std::process::exit(1);
    }
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "quorumlock-model: {problem}\nusage: quorumlock-model [--nodes N] [--deeper] [--controls] [--only NAME]"
    );
    std::process::exit(2);
}
