//! `quorumlock check` through the built binary, against real redis-server
//! nodes: it reports a node without persistence and an unreachable one
//! (exit 1), and passes independent persistent masters (exit 0).
//! (The command probes, key states and JSON are in check.rs.)

use std::net::{Ipv4Addr, TcpListener};

use quorumlock_testkit::cli::{Binary, text};
use quorumlock_testkit::{Persistence, RedisServer, urls};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

#[test]
fn check_reports_missing_persistence_and_an_unreachable_node() {
    let nodes = [
        RedisServer::start_with(Persistence::AofAlways, &[]),
        RedisServer::start_with(Persistence::None, &[]),
        RedisServer::start_with(Persistence::AofAlways, &[]),
    ];
    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut list = urls(&nodes);
    list.push(format!("redis://127.0.0.1:{closed}"));
    let out = QUORUMLOCK
        .command(&[])
        .args(["check", "--node-timeout", "1s", "--nodes", &list.join(",")])
        .output()
        .expect("run quorumlock");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let bare = format!("127.0.0.1:{}/0", nodes[1].port());
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(&bare) && l.contains("warning: no persistence")),
        "{stdout}"
    );
    let dead = format!("127.0.0.1:{closed}/0");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(&dead) && l.contains("ERROR: unreachable")),
        "{stdout}"
    );
    assert!(stdout.contains("4 nodes: an even number"), "{stdout}");
    assert!(
        stdout.contains("appendfsync"),
        "the table has its header: {stdout}"
    );
}

#[test]
fn check_passes_on_independent_persistent_masters() {
    let nodes: Vec<_> = (0..3)
        .map(|_| RedisServer::start_with(Persistence::AofAlways, &[]))
        .collect();
    let out = QUORUMLOCK
        .command(&nodes)
        .args(["check", "--node-timeout", "1s"])
        .output()
        .expect("run quorumlock");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("all nodes fit for Redlock"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("master") && l.contains("always"))
            .count(),
        3
    );
}
