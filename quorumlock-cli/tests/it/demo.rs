//! `quorumlock demo` (a build with `--features demo`): on local nodes it
//! kills and restarts one, on given nodes it starts and kills nothing, and
//! either way prints its table with no overlap and ends with its chart.

use std::path::Path;

use quorumlock_testkit::cli::{Binary, scratch, text};
use quorumlock_testkit::start_nodes;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// The chart at `path`: an SVG document with both panels' titles.
fn chart(path: &Path) -> String {
    let svg = std::fs::read_to_string(path).expect("the chart was written");
    assert!(
        svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    for title in ["acquire latency (ms)", "acquisitions and losses per 100 ms"] {
        assert!(svg.contains(title), "{title}: {svg}");
    }
    svg
}

#[test]
fn demo_short_run_prints_its_table_and_charts_the_kill() {
    let dir = scratch("demo-local");
    let out = QUORUMLOCK
        .command(&[])
        .args(["demo", "--seconds", "2"])
        .current_dir(&dir)
        .output()
        .expect("run quorumlock");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("| worker | acquisitions"), "{stdout}");
    assert!(stdout.contains("losses signalled"), "{stdout}");
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    assert!(stdout.contains("killed node"), "{stdout}");
    // By default in the current directory.
    assert!(stdout.contains("chart: quorumlock-demo.svg"), "{stdout}");
    let svg = chart(&dir.join("quorumlock-demo.svg"));
    assert!(
        svg.contains("node killed") && svg.contains("node restarted"),
        "{svg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_on_given_nodes_starts_and_kills_nothing() {
    let nodes = start_nodes(3);
    let dir = scratch("demo-given");
    let path = dir.join("given.svg");
    let out = QUORUMLOCK
        .command(&nodes)
        .args(["demo", "--seconds", "1", "--chart"])
        .arg(&path)
        .output()
        .expect("run quorumlock");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("using the given nodes"), "{stdout}");
    assert!(!stdout.contains("killed node"), "{stdout}");
    assert!(stdout.contains("overlaps: 0"), "{stdout}");
    let svg = chart(&path);
    assert!(!svg.contains("node killed"), "nothing was killed: {svg}");
    for node in &nodes {
        assert!(node.command(&["PING"]).unwrap().starts_with("+PONG"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
