#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]

// The layers, each using only those above it in this list:
// leaves (config, duration, error, options, random, redact, tasks), then wire <- node <-
// quorum <- lock <- client (builder, client, env, shutdown) <- extras
// (idempotency, blocking, inspect). The etcd and ZooKeeper backends sit
// beside the Redis layers (they use lock::state and quorum::Lease), below
// `backend`, the seam the client and guards use. docs/design.md has the map.
mod config;
mod duration;
mod error;
mod metrics;
mod options;
mod random;
mod redact;
mod tasks;

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
pub use options::LockOptions;
pub use redact::redact_url;
/// The Redis client crate, for [`RedlockBuilder::client`] (a `redis::Client`
/// with settings of the caller's own) at the version this crate uses.
pub use redis;
pub use semaphore::{MAX_PERMITS, Permit, Semaphore};
pub use shutdown::ShutdownReport;
pub use tasks::BackgroundWork;
