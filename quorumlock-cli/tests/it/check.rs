//! `quorumlock check` against real nodes: it names exactly the command a
//! node's ACL user lacks (an error for what every lock needs, a warning for
//! the hand-off and opt-in features), reports lock keys held without a ttl
//! or of the wrong type, leaves no key behind, and prints one JSON object
//! with the documented fields.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Output, Stdio};

use quorumlock::probe::{COMMANDS, Need};
use quorumlock_testkit::{Persistence, RedisServer, SkewedClock, dbsize};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_quorumlock");

/// `quorumlock check --json` over `urls`, with timeouts generous enough
/// for a loaded machine.
fn check(urls: &[String], extra: &[&str]) -> Output {
    Command::new(BIN)
        .args(["check", "--json", "--timeout", "5s", "--node-timeout", "1s"])
        .args(extra)
        .env("QUORUMLOCK_NODES", urls.join(","))
        .stdin(Stdio::null())
        .output()
        .expect("run quorumlock check")
}

fn parsed(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A user with every permission but `denied` (ACL rules such as `-publish`).
fn user(server: &RedisServer, name: &str, rules: &[&str]) -> String {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw"];
    args.extend_from_slice(rules);
    let reply = server.command(&args).expect("ACL SETUSER");
    assert!(reply.starts_with("+OK"), "{args:?}: {reply}");
    format!("redis://{name}:pw@127.0.0.1:{}/", server.port())
}

fn missing(node: &Value) -> Vec<String> {
    node["missing_permissions"]
        .as_array()
        .expect("missing_permissions is a list")
        .iter()
        .map(|c| c.as_str().expect("a command name").to_owned())
        .collect()
}

fn codes(node: &Value) -> Vec<(String, String)> {
    node["findings"]
        .as_array()
        .expect("findings is a list")
        .iter()
        .map(|f| {
            (
                f["level"].as_str().unwrap().to_owned(),
                f["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Each ACL rule that denies one command: the command the check reports,
/// and whether every lock needs it (an error) or only some uses (a warning).
const DENIALS: &[(&str, &str, bool)] = &[
    ("-script|load", "SCRIPT LOAD", true),
    ("-evalsha", "EVALSHA", true),
    ("-set", "SET", true),
    ("-get", "GET", true),
    ("-del", "DEL", true),
    ("-exists", "EXISTS", true),
    ("-mget", "MGET", true),
    ("-pexpire", "PEXPIRE", true),
    ("-pttl", "PTTL", true),
    ("-time", "TIME", true),
    ("-zadd", "ZADD", false),
    ("-zrem", "ZREM", false),
    ("-zpopmin", "ZPOPMIN", false),
    ("-zrange", "ZRANGE", true),
    ("-zremrangebyrank", "ZREMRANGEBYRANK", true),
    ("-publish", "PUBLISH", false),
    ("-subscribe", "SUBSCRIBE", false),
    ("-unsubscribe", "UNSUBSCRIBE", false),
    ("-ping", "PING", false),
    ("-wait", "WAIT", false),
    ("-type", "TYPE", false),
    ("-zcard", "ZCARD", false),
    ("-unlink", "UNLINK", false),
    ("-info", "INFO", false),
    ("-config|get", "CONFIG GET", false),
];

#[test]
fn check_names_exactly_the_command_a_user_lacks() {
    let server = RedisServer::start_with(Persistence::AofAlways, &[]);
    // Every command the library's list names is denied once here, at the
    // level its need calls for: a command added to the list needs a case.
    // CLUSTER SLOTS is tried on a cluster member's primaries only (see
    // tests/it/redis_cluster.rs): this server has cluster support disabled.
    for command in COMMANDS.iter().filter(|c| c.need != Need::Cluster) {
        let case = DENIALS.iter().find(|(_, name, _)| *name == command.name);
        let needed = case
            .unwrap_or_else(|| panic!("no case denies {}", command.name))
            .2;
        assert_eq!(needed, command.need == Need::Lock, "{}", command.name);
    }
    for (i, &denial) in DENIALS.iter().enumerate() {
        assert_denial_reported(&server, i, denial);
    }
    let everything = user(&server, "all", &["~*", "&*", "+@all"]);
    let report = parsed(&check(&[everything], &[]));
    assert_eq!(missing(&report["nodes"][0]), Vec::<String>::new(), "{report:#}");
    // A server outside a cluster is not a cluster's seed: whether its user
    // may run CLUSTER SLOTS does not matter there.
    let no_slots = user(&server, "noslots", &["~*", "&*", "+@all", "-cluster|slots"]);
    let out = check(&[no_slots], &[]);
    let report = parsed(&out);
    assert_eq!(missing(&report["nodes"][0]), Vec::<String>::new(), "{report:#}");
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["status"], "ok", "{report:#}");
}

/// `check` as user `u{i}`, denied `command` by `rule`: the command alone is
/// missing, a finding at the level `needed` calls for names it, the exit
/// status follows (and `--strict` fails on a warning too), and the
/// check's throwaway keys are gone.
fn assert_denial_reported(server: &RedisServer, i: usize, (rule, command, needed): (&str, &str, bool)) {
    let url = user(server, &format!("u{i}"), &["~*", "&*", "+@all", rule]);
    let out = check(&[url], &[]);
    let report = parsed(&out);
    let node = &report["nodes"][0];
    assert_eq!(missing(node), [command], "{rule}: {node:#}");
    let level = if needed { "error" } else { "warning" };
    assert!(
        codes(node).contains(&(level.into(), "missing_permission".into())),
        "{rule}: a {level}: {node:#}"
    );
    let message = node["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "missing_permission")
        .and_then(|f| f["message"].as_str())
        .unwrap();
    assert!(message.contains(command), "{rule}: {message}");
    assert_eq!(
        out.status.code(),
        Some(if needed { 1 } else { 0 }),
        "{rule}: {node:#}"
    );
    assert_eq!(report["exit_code"], i64::from(needed), "{rule}");
    if !needed {
        let strict = check(
            &[format!("redis://u{i}:pw@127.0.0.1:{}/", server.port())],
            &["--strict"],
        );
        assert_eq!(strict.status.code(), Some(1), "{rule} with --strict");
    }
    if rule == "-del" {
        // The probe keys expire by themselves; the next case starts clean.
        assert!(server.command(&["FLUSHALL"]).unwrap().starts_with("+OK"));
    }
    assert_eq!(dbsize(server), 0, "{rule}: the check's keys are gone");
}

#[test]
fn a_new_redis_7_user_without_channels_cannot_hand_off() {
    let server = RedisServer::start_with(Persistence::AofAlways, &[]);
    // Redis 7 gives a new user no channels (acl-pubsub-default resetchannels).
    let url = user(&server, "nochannels", &["~*", "+@all"]);
    let out = check(&[url], &[]);
    let report = parsed(&out);
    let node = &report["nodes"][0];
    let mut found = missing(node);
    found.sort();
    assert_eq!(found, ["PUBLISH", "SUBSCRIBE"], "{node:#}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "a hand-off without wake-ups still locks"
    );
    let text = node.to_string();
    assert!(text.contains("&quorumlock:wake:*"), "the fix is named: {text}");
}

#[test]
fn a_user_without_the_reserved_namespace_is_told_so() {
    let server = RedisServer::start_with(Persistence::AofAlways, &[]);
    let url = user(&server, "appkeys", &["~app:*", "&*", "+@all"]);
    let report = parsed(&check(&[url], &[]));
    let node = &report["nodes"][0];
    assert!(
        codes(node).contains(&("warning".into(), "key_permission".into())),
        "{node:#}"
    );
    assert!(node.to_string().contains("~quorumlock:*"), "{node:#}");
}

#[test]
fn check_key_reports_absent_held_held_without_ttl_and_wrong_type() {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(Persistence::AofAlways, &[]))
        .collect();
    nodes[1].command(&["SET", "job", "token", "PX", "60000"]).unwrap();
    nodes[2].command(&["SET", "job", "forever"]).unwrap();
    nodes[0].command(&["HSET", "job2", "field", "1"]).unwrap();
    let urls = quorumlock_testkit::urls(&nodes);
    let out = check(&urls, &["--key", "job,job2"]);
    let report = parsed(&out);
    let state = |node: usize, key: &str| {
        report["nodes"][node]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("node {node} lists key {key}: {report:#}"))
    };
    assert_eq!(state(0, "job")["state"], "absent");
    assert_eq!(state(1, "job")["state"], "held");
    assert!(
        state(1, "job")["ttl_ms"]
            .as_i64()
            .is_some_and(|ms| ms > 0 && ms <= 60_000)
    );
    assert_eq!(state(2, "job")["state"], "held_without_ttl");
    assert_eq!(state(2, "job")["ttl_ms"], Value::Null);
    assert_eq!(state(0, "job2")["state"], "wrong_type");
    assert_eq!(state(0, "job2")["type"], "hash");
    assert_eq!(state(1, "job2")["state"], "absent");
    assert!(codes(&report["nodes"][2]).contains(&("error".into(), "key_without_ttl".into())));
    assert!(codes(&report["nodes"][0]).contains(&("error".into(), "key_wrong_type".into())));
    assert!(
        !codes(&report["nodes"][1])
            .iter()
            .any(|(level, _)| level == "error"),
        "a lock held with a ttl is no problem: {report:#}"
    );
    assert_eq!(out.status.code(), Some(1), "a key that never expires is an error");

    // The human form: one line per key.
    let human = Command::new(BIN)
        .args([
            "check",
            "--timeout",
            "5s",
            "--key",
            "job",
            "--nodes",
            &urls.join(","),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&human.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("key \"job\":"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("node 1 absent")
            && line.contains("node 2 held (ttl")
            && line.contains("node 3 held WITHOUT a ttl"),
        "{line}"
    );
}

#[test]
fn json_output_is_one_object_with_the_documented_fields() {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(Persistence::AofAlways, &[]))
        .collect();
    let report = parsed(&check(&quorumlock_testkit::urls(&nodes), &[]));
    assert_eq!(report["status"], "ok", "{report:#}");
    assert_eq!(report["exit_code"], 0);
    assert_eq!(report["nodes_total"], 3);
    assert_eq!(report["usable"], 3);
    assert_eq!(report["majority"], 2);
    assert!(report["findings"].as_array().unwrap().is_empty());
    for (i, node) in report["nodes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(node["index"], i + 1);
        assert_eq!(node["node"], format!("127.0.0.1:{}/0", nodes[i].port()));
        assert_eq!(node["status"], "ok");
        assert!(node["ping_ms"].is_f64());
        assert!(node["version"].is_string());
        assert_eq!(node["role"], "master");
        assert_eq!(node["appendonly"], "yes");
        assert_eq!(node["appendfsync"], "always");
        assert!(node["clock_offset_ms"].is_f64() && node["clock_uncertainty_ms"].is_f64());
        assert!(node["clock_rate"].is_f64() && node["clock_rate_error"].is_f64());
        assert!(node["missing_permissions"].as_array().unwrap().is_empty());
        assert!(node["keys"].as_array().unwrap().is_empty());
        assert!(node["findings"].as_array().unwrap().is_empty());
    }

    let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut urls = quorumlock_testkit::urls(&nodes[..1]);
    urls.push(format!("redis://127.0.0.1:{closed}"));
    let out = check(&urls, &["--key", "k"]);
    let report = parsed(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report["status"], "error");
    assert_eq!(report["exit_code"], 1);
    let dead = &report["nodes"][1];
    assert_eq!(dead["status"], "error");
    assert!(
        codes(dead).contains(&("error".into(), "unreachable".into())),
        "{dead:#}"
    );
    assert_eq!(dead["ping_ms"], Value::Null);
    assert_eq!(dead["keys"][0]["state"], "unknown");
    let global: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert!(
        global.contains(&"even_nodes") && global.contains(&"no_majority"),
        "{global:?}"
    );
}

#[test]
fn check_measures_each_nodes_clock_rate_and_warns_of_a_fast_one() {
    let clock = SkewedClock::new(1.5, 0);
    let nodes = [
        RedisServer::start_skewed(&clock, Persistence::AofAlways, &[]),
        RedisServer::start_with(Persistence::AofAlways, &[]),
    ];
    let report = parsed(&check(&quorumlock_testkit::urls(&nodes), &[]));
    let rate = |i: usize| {
        let node = &report["nodes"][i];
        let (rate, error) = (node["clock_rate"].as_f64(), node["clock_rate_error"].as_f64());
        (rate.expect("a rate"), error.expect("its error"), codes(node))
    };
    let (fast, error, findings) = rate(0);
    assert!((fast - 1.5).abs() <= error + 0.01, "{fast} ±{error}");
    assert!(
        findings.contains(&("warning".into(), "clock_rate".into())),
        "{findings:?}"
    );
    let (normal, error, findings) = rate(1);
    assert!((normal - 1.0).abs() <= error + 0.005, "{normal} ±{error}");
    assert!(
        !findings.iter().any(|(_, code)| code == "clock_rate"),
        "{findings:?}"
    );
}
