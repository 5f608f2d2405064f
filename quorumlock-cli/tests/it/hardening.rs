//! Edges of the nodes through the command line: busy is told apart from an
//! outage when a node is down. (The library's side of it is in quorumlock's
//! tests/it/busy_or_unreachable.rs, the other edges of its input and nodes in
//! the files beside it.)

use quorumlock_testkit::cli::{Binary, exit};
use quorumlock_testkit::{set_foreign, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// A cron job that finds the lock held during a node's maintenance exits 75
/// (busy, try later), not 69 (nodes unreachable), and says which node
/// failed.
#[test]
fn quorumlock_run_is_busy_not_unreachable_with_one_node_down() {
    let mut nodes = start_nodes(3);
    for node in &nodes {
        set_foreign(node, "cron", "another-owner", 30_000);
    }
    let down = nodes[2].port();
    nodes[2].kill();
    let output = QUORUMLOCK
        .command(&nodes)
        .args([
            "run",
            "--key",
            "cron",
            "--wait",
            "0",
            "--node-timeout",
            "500ms",
            "--",
            "true",
        ])
        .output()
        .expect("run quorumlock");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(exit::BUSY), "{stderr}");
    assert!(
        stderr.contains(&down.to_string()),
        "names the failed node: {stderr}"
    );
}
