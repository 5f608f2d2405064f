//! A model of quorumlock's Redlock protocol, checked exhaustively with
//! [`stateright`].
//!
//! The model follows the library as it is written, not an idealised
//! Redlock: N nodes, each a key store with expiry on its own clock (which may
//! run fast), and clients that acquire on every node at once with a per-node
//! timeout, exit early once the outcome is certain, trust the lock for
//! `ttl - elapsed - drift`, release a failed attempt on every node that did
//! not refuse it (also where the reply never came), release and renew with
//! an owner check, heal a missing key on renewal, fire the loss at
//! `valid_until` from a local timer, and (fenced) agree on a token with a
//! majority max-register, proposed with the grant and, where that found no
//! majority, in an owner-checked proposal round. Each constant and transition names the library
//! code it stands for.
//!
//! Faults are actions the checker may take at any point: a message lost or
//! held back any number of ticks (a slow network, a paused node or client),
//! a node crash with or without persistence and its restart, and node
//! clocks that run fast: within the drift allowance, or (one node) beyond
//! it, with the clients measuring its rate or not. The properties ([`model`]) are checked in every
//! reachable state; the negative controls ([`Config`]'s other
//! constructors) each break one rule and must produce a counterexample.
//!
//! ```
//! use quorumlock_model::check::{self, Mode};
//! use quorumlock_model::{Config, MUTUAL_EXCLUSION};
//!
//! let outcome = check::run(Config::no_drift(3), Mode::Counterexample(MUTUAL_EXCLUSION));
//! let steps = outcome.trace(MUTUAL_EXCLUSION).expect("a fast clock beats a zero allowance");
//! assert!(steps.len() > 3);
//! ```

#![forbid(unsafe_code)]

pub mod check;
mod client;
pub mod config;
pub mod model;
mod node;
pub mod state;
mod symmetry;
pub mod trace;

/// The checker clones and drops millions of small states on every core;
/// glibc's malloc spent a third of an exhaustive run on its arena locks
/// and free lists, which mimalloc's per-thread heaps avoid.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub use config::{Config, Fencing, Persistence, RogueClock};

/// Each negative control with the property it must break.
pub fn controls(nodes: usize) -> Vec<(Config, &'static str)> {
    vec![
        (Config::no_drift(nodes), MUTUAL_EXCLUSION),
        (Config::rogue_unmeasured(nodes), MUTUAL_EXCLUSION),
        (Config::immediate_restart(nodes), MUTUAL_EXCLUSION),
        (Config::naive_fence(nodes), FENCING),
        (Config::blind_release(nodes), MUTUAL_EXCLUSION),
        (Config::minority_extend(nodes), MUTUAL_EXCLUSION),
        (Config::undo_granted_only(nodes), NO_LEAK),
        (Config::unfenced_writes(nodes), WRITES_IN_ORDER),
    ]
}
pub use model::{
    Action, FENCING, LOSS_SIGNALLED, MUTUAL_EXCLUSION, NO_LEAK, Protocol, REACH_HANDOVER, REACH_LOSS,
    REACH_RENEWAL, REACH_TOKENS, REACH_WRITES, WRITES_IN_ORDER,
};
