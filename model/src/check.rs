//! Runs the checker on one configuration and sums up what it found.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use crate::config::Config;
use crate::model::{Action, Protocol};
use crate::state::State;
use crate::trace;

/// What one exhaustive (breadth-first) run found.
pub struct Outcome {
    /// The configuration checked.
    pub config: Config,
    /// States generated, with repeats.
    pub states: usize,
    /// Distinct states.
    pub unique: usize,
    /// The deepest path explored, in steps.
    pub depth: usize,
    /// How long the run took.
    pub elapsed: Duration,
    /// Safety properties violated, with the shortest run found to each.
    pub violations: Vec<(&'static str, Path<State, Action>)>,
    /// Reachability properties reached (the model is not vacuous).
    pub reached: BTreeSet<&'static str>,
    /// Reachability properties never reached.
    pub unreached: BTreeSet<&'static str>,
}

impl Outcome {
    /// The violation of `property`, if found.
    pub fn violation(&self, property: &str) -> Option<&Path<State, Action>> {
        self.violations
            .iter()
            .find(|(name, _)| *name == property)
            .map(|(_, path)| path)
    }

    /// The steps of the violation of `property`, readable.
    pub fn trace(&self, property: &str) -> Option<Vec<String>> {
        let model = Protocol {
            config: self.config.clone(),
            symmetric: false,
        };
        self.violation(property)
            .map(|path| trace::steps(&model, path, property))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} (N = {}, {} clients, horizon {}): {} states, {} unique, depth {}, {:.2?}",
            self.config.name,
            self.config.nodes,
            self.config.clients,
            self.config.horizon,
            self.states,
            self.unique,
            self.depth,
            self.elapsed
        )?;
        for (name, _) in &self.violations {
            let steps = self.trace(name).unwrap_or_default();
            // The first line may name the fast nodes rather than a step.
            let actions = steps.iter().filter(|line| line.starts_with("t=")).count();
            writeln!(f, "  VIOLATED: {name} ({actions} steps):")?;
            for step in steps {
                writeln!(f, "    {step}")?;
            }
        }
        for name in &self.reached {
            writeln!(f, "  reached: {name}")?;
        }
        for name in &self.unreached {
            writeln!(f, "  NOT reached: {name}")?;
        }
        Ok(())
    }
}

/// How a run explores.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Every reachable state, up to renaming of the nodes, on every core:
    /// for the safe configurations.
    Exhaustive,
    /// Breadth first on one thread until the first violation of the
    /// property, without renaming: the shortest counterexample, with node
    /// numbers that stay put (the negative controls).
    Counterexample(&'static str),
}

/// Explores the states of `config` breadth first, as `mode` says.
pub fn run(config: Config, mode: Mode) -> Outcome {
    let model = Protocol {
        config: config.clone(),
        symmetric: matches!(mode, Mode::Exhaustive),
    };
    let properties = model.properties();
    let started = Instant::now();
    let builder = model.checker();
    let builder = match mode {
        Mode::Exhaustive => builder.threads(std::thread::available_parallelism().map_or(1, usize::from)),
        Mode::Counterexample(name) => builder
            .threads(1)
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([name]))),
    };
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let discoveries = checker.discoveries();
    let mut outcome = Outcome {
        config,
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed,
        violations: Vec::new(),
        reached: BTreeSet::new(),
        unreached: BTreeSet::new(),
    };
    for property in properties {
        let found = discoveries.get(property.name);
        match (property.expectation, found) {
            (Expectation::Sometimes, Some(_)) => {
                outcome.reached.insert(property.name);
            }
            (Expectation::Sometimes, None) => {
                outcome.unreached.insert(property.name);
            }
            (_, Some(path)) => outcome.violations.push((property.name, path.clone())),
            (_, None) => {}
        }
    }
    outcome
}
