#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]

// The layers, each using only those above it in this list: the leaves
// (config, duration, error, metrics, options, random, redact, tasks); the
// lock core (lock), which names no store; the stores, peers under
// `backend` (redlock, etcd, zookeeper), and the seam over them (backend);
// the client (builder, client, env, shutdown); the extras (idempotency,
// semaphore, inspect, blocking). docs/design.md has the map.
mod config;
mod duration;
mod error;
mod metrics;
mod options;
mod random;
mod redact;
mod tasks;
mod wall_clock;

mod lock;

mod backend;
mod builder;
mod client;
mod env;
mod shutdown;

#[cfg(feature = "blocking")]
pub mod blocking;
mod idempotency;
mod inspect;
mod semaphore;
#[cfg(feature = "sim")]
pub mod sim;

pub use backend::probe;
pub use backend::redlock::fence::{Fenced, FencedWrite};
pub use backend::redlock::node::ReplicaAck;
pub use builder::RedlockBuilder;
pub use client::Redlock;
pub use config::{
    DEFAULT_BATCHING, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED, DEFAULT_HEAL,
    DEFAULT_MIN_VALIDITY, DEFAULT_NODE_TIMEOUT, DEFAULT_REPLICA_ACK_TIMEOUT, DEFAULT_RESULT_TTL,
    DEFAULT_RETRY_DELAY, DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_TTL, DEFAULT_WAIT, MAX_TTL, MIN_RETRY_DELAY,
    START_MARGIN,
};
pub use duration::parse_duration;
pub use error::{ConfigError, Error, NodeError, NodeErrorKind, Result, Setting, StoreFailure};
pub use idempotency::{Idempotency, IdempotencyError};
pub use lock::acquisition::Acquisition;
pub use lock::guard::{Guard, ReleaseReport};
pub use lock::inspection::{
    DeletedValue, Inspection, KeyState, NodeInspection, NodeUnlock, UnlockOutcome, UnlockReport, Verdict,
};
pub use lock::resources::{MAX_RESOURCES, RESERVED_PREFIX, Resources};
pub use lock::watch::LockWatch;
pub use options::LockOptions;
pub use redact::redact_url;
/// The Redis client crate, for [`RedlockBuilder::client`] (a `redis::Client`
/// with settings of the caller's own) at the version this crate uses.
pub use redis;
pub use semaphore::{MAX_PERMITS, Permit, Semaphore};
pub use shutdown::ShutdownReport;
pub use tasks::BackgroundWork;
