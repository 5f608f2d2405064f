#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]

mod batch;
#[cfg(feature = "blocking")]
pub mod blocking;
mod builder;
mod error;
mod fence;
mod guard;
mod handoff;
mod idempotency;
mod keys;
mod lock;
mod node;
mod options;
mod quorum;
mod random;
mod replica;
mod scripts;
mod shutdown;
mod tasks;
mod watchdog;

pub use builder::{
    DEFAULT_BATCHING, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED, DEFAULT_HEAL,
    DEFAULT_NODE_TIMEOUT, DEFAULT_TTL, MAX_TTL, RedlockBuilder, redact_url,
};
pub use error::{Error, NodeError, NodeErrorKind, Result};
pub use fence::{FENCE_RETENTION, FENCE_ROUNDS, Fenced, FencedWrite};
pub use guard::{Guard, ReleaseReport};
pub use idempotency::{DEFAULT_RESULT_TTL, Idempotency};
pub use keys::RESERVED_PREFIX;
pub use lock::{MAX_RESOURCES, Redlock, Resources};
pub use options::{DEFAULT_MIN_VALIDITY, DEFAULT_RETRY_DELAY, DEFAULT_WAIT, LockOptions, MIN_RETRY_DELAY};
pub use replica::{DEFAULT_REPLICA_ACK_TIMEOUT, ReplicaAck};
pub use shutdown::{DEFAULT_SHUTDOWN_TIMEOUT, ShutdownReport};
