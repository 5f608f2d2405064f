//! `quorumlock status` and `quorumlock unlock` against real nodes: the
//! table and the JSON name each node's holder, ttl and waiters with the
//! majority verdict and its exit status; `unlock --token` deletes only that
//! token; `--force --yes` deletes a foreign value and logs it; `--force`
//! without a terminal and without `--yes` deletes nothing.

use std::process::Output;

use quorumlock_testkit::cli::Binary;
use quorumlock_testkit::{RedisServer, get, set_foreign, start_nodes};
use serde_json::Value;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));
const KEY: &str = "archive:nightly";

/// `quorumlock ARGS` over `servers`, run to its end, with stdin not a
/// terminal and a node timeout generous enough for a loaded machine.
fn output(servers: &[RedisServer], args: &[&str]) -> Output {
    QUORUMLOCK
        .command(servers)
        .args(args)
        .args(["--node-timeout", "1s"])
        .output()
        .expect("run quorumlock")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn parsed(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(out), stderr(out)))
}

#[test]
fn status_shows_the_holder_per_node_and_the_verdict_in_its_exit_status() {
    let servers = start_nodes(3);
    set_foreign(&servers[0], KEY, "tok", 10_000);
    set_foreign(&servers[1], KEY, "tok", 10_000);

    let out = output(&servers, &["status", KEY]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains(&format!("key \"{KEY}\": held by \"tok\" for at least")),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("127.0.0.1:")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[0].contains("held") && rows[0].contains("\"tok\""), "{text}");
    assert!(rows[2].contains("absent"), "{text}");
    for (row, server) in rows.iter().zip(&servers) {
        assert!(row.contains(&format!(":{}/0", server.port())), "{text}");
    }

    let out = output(&servers, &["status", "--json", KEY, "free:key"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let json = parsed(&out);
    assert_eq!(json["exit_code"], 1);
    let held = &json["keys"][0];
    assert_eq!(held["key"], KEY);
    assert_eq!(held["verdict"], "held");
    assert_eq!(held["token"], "tok");
    assert!(held["valid_for_ms"].as_u64().expect("a number") > 8_000, "{held}");
    assert_eq!(held["quorum"], 2);
    let nodes = held["nodes"].as_array().expect("nodes");
    assert_eq!(nodes[0]["state"], "held");
    assert_eq!(nodes[0]["value"], "tok");
    assert_eq!(nodes[0]["type"], "string");
    assert!(nodes[0]["ttl_ms"].as_u64().expect("a ttl") <= 10_000);
    assert_eq!(nodes[0]["waiters"], 0);
    assert_eq!(nodes[2]["state"], "absent");
    assert_eq!(nodes[2]["ttl_ms"], Value::Null);
    assert_eq!(json["keys"][1]["verdict"], "free");

    let out = output(&servers, &["status", "free:key"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("free"), "{}", stdout(&out));

    set_foreign(&servers[2], KEY, "other", 10_000);
    set_foreign(&servers[1], KEY, "third", 10_000);
    let out = output(&servers, &["status", "--json", KEY]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert_eq!(parsed(&out)["keys"][0]["verdict"], "indeterminate");

    let out = output(&servers, &["status", "quorumlock:fence:x"]);
    assert_eq!(out.status.code(), Some(2), "a reserved name is bad usage");
}

#[test]
fn unlock_with_a_token_deletes_only_that_token() {
    let servers = start_nodes(3);
    for server in &servers {
        set_foreign(server, KEY, "holder", 10_000);
    }
    let out = output(&servers, &["unlock", KEY, "--token", "someone-else"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(servers.iter().all(|s| get(s, KEY).as_deref() == Some("holder")));

    let out = output(&servers, &["unlock", KEY, "--token", "holder"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches("deleted \"holder\"").count(),
        3,
        "{}",
        stderr(&out)
    );
    assert!(servers.iter().all(|s| get(s, KEY).is_none()));
}

#[test]
fn force_unlock_with_yes_deletes_a_foreign_value_and_logs_it() {
    let servers = start_nodes(3);
    for server in &servers[..2] {
        set_foreign(server, KEY, "foreign", 10_000);
    }
    let out = output(&servers, &["unlock", KEY, "--force", "--yes"]);
    let log = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert_eq!(log.matches("deleted \"foreign\"").count(), 2, "{log}");
    assert_eq!(log.matches("nothing to delete").count(), 1, "{log}");
    assert!(servers.iter().all(|s| get(s, KEY).is_none()));

    let out = output(&servers, &["unlock", KEY, "--force", "--yes"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "nothing left to delete: {}",
        stderr(&out)
    );
}

#[test]
fn force_unlock_refuses_without_a_terminal_and_without_yes() {
    let servers = start_nodes(3);
    for server in &servers {
        set_foreign(server, KEY, "foreign", 10_000);
    }
    let out = output(&servers, &["unlock", KEY, "--force"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    assert!(servers.iter().all(|s| get(s, KEY).as_deref() == Some("foreign")));

    let out = output(&servers, &["unlock", KEY]);
    assert_eq!(out.status.code(), Some(2), "neither --token nor --force");
}

#[test]
fn the_help_lists_status_and_unlock_with_examples() {
    let out = QUORUMLOCK.command(&[]).arg("--help").output().expect("run");
    let help = stdout(&out);
    for text in ["status", "unlock", "quorumlock status archive:nightly", "--force"] {
        assert!(help.contains(text), "{text}: {help}");
    }
}
