//! Every duration a user could type into `quorumlock run`, however absurd,
//! is a usage error or a run with a documented exit status, never a panic,
//! against a real redis-server. (The library's settings have a property
//! test of their own in quorumlock.)

use proptest::prelude::*;
use quorumlock_testkit::RedisServer;
use quorumlock_testkit::cli::Binary;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// A duration as a user could type it: plain numbers of any size
/// (including exponents), units, zero.
fn typed() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("0".to_owned()),
        2 => Just("1e19".to_owned()),
        1 => Just("1e300".to_owned()),
        1 => Just("18446744073709551615s".to_owned()),
        1 => Just("0.0000001".to_owned()),
        3 => (1u64..5_000).prop_map(|ms| format!("{ms}ms")),
        3 => (1u64..120).prop_map(|s| format!("{s}s")),
        1 => any::<u64>().prop_map(|h| format!("{h}h")),
    ]
}

/// Statuses `quorumlock run` documents; 101 (a Rust panic) is not one.
const DOCUMENTED: [i32; 9] = [0, 2, 69, 75, 79, 125, 126, 127, 130];

#[test]
fn any_duration_flag_is_a_usage_error_or_a_run() {
    // One node for every case (starting one per case would dominate the
    // run), owned by the test so that it stops with it: a server in a
    // `static` is never dropped and would outlive the test process.
    let node = RedisServer::start();
    let config = ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ttl in typed(), wait in typed(), grace in typed(), timeout in typed())| {
        let key = format!("props:cli:{}", rand::random::<u64>());
        let output = QUORUMLOCK
            .command(std::slice::from_ref(&node))
            .args(["run", "--key", &key, "--ttl", &ttl, "--wait", &wait, "--grace", &grace])
            .args(["--node-timeout", &timeout, "--", "true"])
            .output()
            .expect("run quorumlock");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        prop_assert!(!stderr.contains("panicked"), "{}", stderr);
        prop_assert!(code.is_some_and(|c| DOCUMENTED.contains(&c)), "status {:?}: {}", code, stderr);
    });
}
