//! What the `quorumlock` binary exits with: `run` passes the command's
//! status through (128 + N for a death by signal N, 127 for a command not
//! found), and bad usage (bad flags, durations, nodes, a grace period too
//! long for the ttl, TLS options in a build without TLS) exits 2 with a
//! message that names the problem.

use std::process::Output;

use quorumlock_testkit::cli::{Binary, exit, text};
use quorumlock_testkit::{RedisServer, dbsize, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// `quorumlock ARGS` over `nodes`, run to its end.
fn output(nodes: &[RedisServer], args: &[&str]) -> Output {
    QUORUMLOCK
        .command(nodes)
        .args(args)
        .output()
        .expect("run quorumlock")
}

#[test]
fn exit_statuses_pass_through() {
    let nodes = start_nodes(1);
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 128 + 15)] {
        let out = output(&nodes, &["run", "--key", "cli:codes", "--", "sh", "-c", script]);
        assert_eq!(out.status.code(), Some(code), "{script}: {}", text(&out.stderr));
    }
    let missing = output(&nodes, &["run", "--key", "cli:codes", "--", "/nonexistent/cmd"]);
    assert_eq!(missing.status.code(), Some(exit::NOT_FOUND));
    assert!(text(&missing.stderr).contains("/nonexistent/cmd"));
    assert_eq!(dbsize(&nodes[0]), 0, "every run released its lock");
}

#[test]
fn the_grace_period_defaults_to_fit_a_short_ttl_and_a_longer_one_is_refused() {
    let nodes = start_nodes(1);
    let short = output(
        &nodes,
        &["run", "--key", "cli:grace", "--ttl", "2s", "--", "true"],
    );
    assert_eq!(short.status.code(), Some(0), "stderr: {}", text(&short.stderr));

    let refused = output(
        &nodes,
        &[
            "run",
            "--key",
            "cli:grace",
            "--grace",
            "3s",
            "--ttl",
            "2s",
            "--",
            "true",
        ],
    );
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(exit::USAGE), "{stderr}");
    assert!(
        stderr.contains("--grace 3s") && stderr.contains("--ttl 2s"),
        "{stderr}"
    );

    // The ttl was not given: the message says it is the default.
    let refused = output(
        &nodes,
        &["run", "--key", "cli:grace", "--grace", "20s", "--", "true"],
    );
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(exit::USAGE), "{stderr}");
    assert!(
        stderr.contains("--grace 20s") && stderr.contains("30s (default)"),
        "{stderr}"
    );
    assert!(!stderr.contains("--ttl 30s"), "{stderr}");
    assert_eq!(dbsize(&nodes[0]), 0, "the run released its lock");
}

#[test]
fn bad_arguments_exit_2_with_a_message() {
    let node = ["--nodes", "redis://127.0.0.1:1"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--key", "k", "--ttl", "5x", "--", "true"],
            "unknown unit \"x\"",
        ),
        (&["run", "--key", "k", "--wait=-1s", "--", "true"], "negative"),
        (&["run", "--", "true"], "--key"),
        (&["run", "--key", "k"], "COMMAND"),
        (&["run", "--key", "k", "true"], "unexpected argument"),
        (
            &["run", "--key", "k", "--ttl", "10s", "--grace", "6s", "--", "true"],
            "half of --ttl",
        ),
        (&["run", "--key", "k", "--", "true"], "no nodes"),
        (
            &["run", "--key", "k", "--nodes", "not a url", "--", "true"],
            "bad node URL",
        ),
        (
            &[
                "run", "--key", "k", "--ttl", "0", "--grace", "0", node[0], node[1], "--", "true",
            ],
            "ttl",
        ),
        (&["check"], "no nodes"),
        #[cfg(feature = "demo")]
        (&["demo", "--workers", "0"], "at least 1"),
        (&["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, message) in cases {
        let out = output(&[], args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(exit::USAGE), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: expected {message:?} in {stderr}"
        );
    }
}
