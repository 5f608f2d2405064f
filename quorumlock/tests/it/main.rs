//! The integration tests of quorumlock, as one test binary: each former
//! `tests/*.rs` file (or `tests/*/` directory) is a module here, so that
//! tokio, redis, the etcd and ZooKeeper clients and the test kit are linked
//! once rather than once per file. Run one group with a filter, e.g.
//! `cargo test -p quorumlock --test it watchdog::`.
//!
//! Three tests keep a binary of their own, because each changes something
//! for the whole process (see their `[[test]]` entries in Cargo.toml):
//! `metrics.rs` (the process's one metrics recorder, whose counts would take
//! in every other test's locks), `from_env.rs` (sets environment variables)
//! and `tokens.rs` (forks the process).
//!
//! The modules of the optional backends and of the blocking client are
//! compiled with the package feature they need: `consensus` (the etcd and
//! ZooKeeper stores' conformance suite) with either store's, and in it each
//! store's module with its own.

mod async_send_sync;
mod batching;
#[cfg(feature = "blocking")]
mod blocking;
mod bounded_scripts;
mod busy_or_unreachable;
mod chaos;
mod config;
mod config_props;
mod connection_health;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod consensus;
mod contention;
mod fast_clock;
mod fencing;
mod handoff;
mod harness_faults;
mod idempotency;
mod inspect;
mod lifecycle;
mod lock_size;
mod lock_unlock;
mod min_hold;
mod node_failures;
mod redis_cluster;
mod release_racing_renewal;
mod replica;
mod reserved_keys;
mod scoped;
mod semaphore;
mod sentinel;
mod start_window;
mod watchdog;
