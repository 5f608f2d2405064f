//! The comparison runner end to end with tiny counts: every scenario runs
//! against local nodes the runner starts, its report goes to a temporary
//! directory, and the runner exits non-zero unless quorumlock worked in
//! each. The full run (`cargo run -p quorumlock-compare --release`) is a
//! benchmark, never a test.

use std::process::Command;

#[test]
fn every_scenario_runs_with_tiny_counts() {
    let status = Command::new(env!("CARGO_BIN_EXE_quorumlock-compare"))
        .arg("--smoke")
        .status()
        .expect("the comparison runner starts");
    assert!(
        status.success(),
        "the comparison runner's smoke run failed: {status}"
    );
}
