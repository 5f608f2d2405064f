//! `quorumlock demo` (a build with `--features demo`): on local nodes it
//! kills and restarts one, on given nodes it starts and kills nothing, and
//! either way prints its table with no overlap.

#![cfg(feature = "demo")]

use quorumlock_testkit::cli::{Binary, text};
use quorumlock_testkit::start_nodes;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

#[test]
fn demo_short_run_prints_its_table() {
    let out = QUORUMLOCK
        .command(&[])
        .args(["demo", "--seconds", "2"])
        .output()
        .expect("run quorumlock");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("| worker | acquisitions"), "{stdout}");
    assert!(stdout.contains("losses signalled"), "{stdout}");
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    assert!(stdout.contains("killed node"), "{stdout}");
}

#[test]
fn demo_on_given_nodes_starts_and_kills_nothing() {
    let nodes = start_nodes(3);
    let out = QUORUMLOCK
        .command(&nodes)
        .args(["demo", "--seconds", "1"])
        .output()
        .expect("run quorumlock");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("using the given nodes"), "{stdout}");
    assert!(!stdout.contains("killed node"), "{stdout}");
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    for node in &nodes {
        assert!(node.command(&["PING"]).unwrap().starts_with("+PONG"));
    }
}
