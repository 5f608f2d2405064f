//! The integration tests of the `quorumlock` binary, as one test binary:
//! each former `tests/*.rs` file is a module here, so that the test kit,
//! tokio and redis are linked once rather than once per file. Every module
//! runs the binary that cargo built for these tests
//! (`CARGO_BIN_EXE_quorumlock`). Run one group with a filter, e.g.
//! `cargo test -p quorumlock-cli --test it cli_supervision::`.
//!
//! The modules of optional features are compiled with the package feature
//! they need.

mod check;
mod check_findings;
mod cli_secrets;
mod cli_supervision;
mod completions_and_man;
mod config_props;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod consensus;
#[cfg(feature = "demo")]
mod demo;
#[cfg(feature = "etcd")]
mod etcd;
mod exit_statuses;
mod fenced_run;
mod hardening;
mod metrics_file;
mod min_hold;
mod redis_cluster;
mod run_exclusion;
mod run_termination;
mod start_window;
mod status;
#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "zookeeper")]
mod zookeeper;
