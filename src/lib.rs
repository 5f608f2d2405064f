#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, unreachable_pub)]

mod builder;
mod error;
mod idempotency;
mod lock;
mod node;
mod quorum;
mod scripts;

pub use builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_DRIFT_FACTOR, DEFAULT_DRIFT_FIXED, DEFAULT_MIN_VALIDITY,
    DEFAULT_NODE_TIMEOUT, DEFAULT_RETRY_DELAY, DEFAULT_TTL, DEFAULT_WAIT, RedlockBuilder,
};
pub use error::{Error, NodeError, NodeErrorKind, Result};
pub use idempotency::{DEFAULT_RESULT_TTL, Idempotency};
pub use lock::{Guard, Redlock, ReleaseReport, Resources};
