//! Deterministic simulation of quorumlock: the library's real client, on one
//! current-thread Tokio runtime with the paused clock, against simulated
//! Redis nodes over a simulated network, every choice drawn from one seed.
//! A run that breaks a property is replayed, event for event, from its seed.
//!
//! Unstable: for the project's own tests and soaks (docs/reliability.md).

pub mod audit;
pub mod faults;
pub mod history;
pub mod net;
pub mod node;
pub mod nodes;
pub mod outages;
pub mod scenario;
pub mod shrink;
pub mod violation;
pub mod workload;
pub mod world;

pub use scenario::Scenario;
pub use world::{Outcome, run};

#[cfg(test)]
mod ci;
