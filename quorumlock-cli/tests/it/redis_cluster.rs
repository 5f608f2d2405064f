//! The CLI over Redis Cluster and Sentinel members: `run`, `status` and
//! `check` through the built binary, against real clusters (three primaries,
//! no replicas) and a Sentinel-managed master, shared by the tests that run
//! at the same time (each test uses names of its own).

use std::process::Output;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use quorumlock_testkit::cli::{Binary, exit, scratch, text, wait_child, wait_for_line};
use quorumlock_testkit::redis_cluster::RedisCluster;
use quorumlock_testkit::sentinel::SentinelSetup;
use quorumlock_testkit::{RedisServer, get, set_foreign};
use serde_json::Value;

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// Three clusters and a Sentinel-managed master without replicas.
struct Members {
    clusters: [RedisCluster; 3],
    sentinel: SentinelSetup,
}

/// The members of the tests running now, started by the first of them. A
/// static would never be dropped, and its servers would outlive the test
/// binary: they stop with the last test that holds them.
fn members() -> Arc<Members> {
    static SHARED: Mutex<Weak<Members>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(members) = shared.upgrade() {
        return members;
    }
    let members = Arc::new(Members::start());
    *shared = Arc::downgrade(&members);
    members
}

impl Members {
    fn start() -> Members {
        // Started side by side: forming a cluster is mostly waiting.
        std::thread::scope(|scope| {
            let clusters: Vec<_> = (0..3)
                .map(|_| scope.spawn(|| RedisCluster::start(3, 0)))
                .collect();
            let sentinel = scope.spawn(|| SentinelSetup::start(0, 1));
            let clusters: Vec<RedisCluster> = clusters
                .into_iter()
                .map(|c| c.join().expect("cluster started"))
                .collect();
            Members {
                clusters: clusters.try_into().expect("three clusters"),
                sentinel: sentinel.join().expect("sentinel started"),
            }
        })
    }

    /// The sentinels' master now.
    fn master(&self) -> &RedisServer {
        self.sentinel.data_node(self.sentinel.master_index())
    }
}

/// `quorumlock ARGS`, run to its end, with a node timeout generous enough
/// for a loaded machine.
fn output(args: &[&str]) -> Output {
    QUORUMLOCK
        .command(&[])
        .args(args)
        .args(["--node-timeout", "1s"])
        .output()
        .expect("run quorumlock")
}

fn stdout(out: &Output) -> String {
    text(&out.stdout)
}

fn parsed(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", stdout(out), text(&out.stderr)))
}

/// The value of `key` on `cluster`, through `redis-cli -c`.
fn cluster_get(cluster: &RedisCluster, key: &str) -> String {
    cluster.cli(&["GET", key]).expect("GET").trim().to_owned()
}

/// Sets `key` to another owner's `value` on `cluster`, through `redis-cli -c`.
fn cluster_set(cluster: &RedisCluster, key: &str, value: &str) {
    let reply = cluster.cli(&["SET", key, value, "PX", "60000"]).expect("SET");
    assert_eq!(reply.trim(), "OK", "SET {key}");
}

#[test]
fn run_over_cluster_members_holds_the_lock_on_each_while_the_command_runs() {
    let members = members();
    let key = "cli-members:run";
    let nodes: Vec<String> = members.clusters.iter().map(RedisCluster::url).collect();
    let dir = scratch("members-run");
    let seen = dir.join("seen");
    // The command reads the lock key on each cluster (following redirects).
    let reads: Vec<String> = members
        .clusters
        .iter()
        .map(|c| {
            format!(
                "redis-cli -c -p {} EXISTS {key} >> {}",
                c.ports()[0],
                seen.display()
            )
        })
        .collect();
    let out = output(&[
        "run",
        "--nodes",
        &nodes.join(","),
        "--key",
        key,
        "--",
        "sh",
        "-c",
        &reads.join("; "),
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    // A majority at least: the lock is granted once two clusters confirm,
    // and the third one's write may still be on its way.
    let seen = std::fs::read_to_string(&seen).expect("the command ran");
    let holding = seen.lines().filter(|line| *line == "1").count();
    assert!(
        holding >= 2 && seen.lines().count() == 3,
        "EXISTS on each cluster: {seen:?}"
    );
    for cluster in &members.clusters {
        assert_eq!(cluster_get(cluster, key), "", "released on {}", cluster.url());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_run_over_mixed_members_is_busy_while_the_first_holds_the_lock() {
    let members = members();
    let key = "cli-members:busy";
    let nodes = [
        members.clusters[0].url(),
        members.sentinel.url(),
        members.clusters[1].url(),
    ]
    .join(",");
    let dir = scratch("members-busy");
    let (started, release) = (dir.join("started"), dir.join("release"));
    let script = format!(
        "echo >> {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        release.display()
    );
    let mut first = QUORUMLOCK
        .command(&[])
        .args(["run", "--nodes", &nodes, "--key", key, "--node-timeout", "1s"])
        .args(["--", "sh", "-c", &script])
        .spawn()
        .expect("spawn first run");
    wait_for_line(&started, Duration::from_secs(10));
    // On the master too, in time: the lock is granted once a majority of the
    // three members confirmed, and the last one's write may still be on its
    // way.
    let since = std::time::Instant::now();
    while get(members.master(), key).unwrap_or_default().is_empty() {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "never held on the master"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let busy = output(&[
        "run", "--nodes", &nodes, "--key", key, "--wait", "0", "--", "true",
    ]);
    assert_eq!(
        busy.status.code(),
        Some(exit::BUSY),
        "stderr: {}",
        text(&busy.stderr)
    );

    std::fs::write(&release, "").expect("release the first run");
    assert!(wait_child(&mut first, Duration::from_secs(20)).success());
    assert_eq!(get(members.master(), key), None, "released on the master");
    let again = output(&[
        "run", "--nodes", &nodes, "--key", key, "--wait", "0", "--", "true",
    ]);
    assert!(again.status.success(), "stderr: {}", text(&again.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_names_the_holder_on_cluster_and_sentinel_members() {
    let members = members();
    let key = "cli-members:status";
    let nodes = [
        members.clusters[1].url(),
        members.clusters[2].url(),
        members.sentinel.url(),
    ]
    .join(",");
    let free = output(&["status", "--nodes", &nodes, key]);
    assert_eq!(
        free.status.code(),
        Some(0),
        "{}{}",
        stdout(&free),
        text(&free.stderr)
    );

    cluster_set(&members.clusters[1], key, "tok");
    cluster_set(&members.clusters[2], key, "tok");
    set_foreign(members.master(), key, "tok", 60_000);
    let held = output(&["status", "--nodes", &nodes, key]);
    let shown = stdout(&held);
    assert_eq!(held.status.code(), Some(1), "{shown}{}", text(&held.stderr));
    assert!(
        shown.contains(&format!("key \"{key}\": held by \"tok\"")),
        "{shown}"
    );
}

#[test]
fn check_lists_a_clusters_primaries_with_their_slots_and_probes_each() {
    let members = members();
    let cluster = &members.clusters[2];
    let key = "cli-members:check";
    cluster_set(cluster, key, "tok");
    let url = cluster.url();

    let out = output(&["check", "--nodes", &url, "--key", key, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        text(&out.stderr)
    );
    let report = parsed(&out);
    let node = &report["nodes"][0];
    assert_eq!(node["kind"], "cluster", "{report:#}");
    assert_eq!(
        node["keys"][0]["state"], "held",
        "read on its slot's primary: {report:#}"
    );
    let primaries = node["primaries"].as_array().expect("primaries");
    assert_eq!(primaries.len(), 3, "{report:#}");
    let served: u64 = primaries
        .iter()
        .flat_map(|p| p["slots"].as_array().expect("slots").clone())
        .map(|range| range[1].as_u64().expect("last") - range[0].as_u64().expect("first") + 1)
        .sum();
    assert_eq!(served, 16384, "{report:#}");
    let servers = node["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 3, "{report:#}");
    for server in servers {
        assert_ne!(server["status"], "error", "{server:#}");
        assert_eq!(server["role"], "master", "{server:#}");
        assert_eq!(server["missing_permissions"], serde_json::json!([]), "{server:#}");
    }

    let out = output(&["check", "--nodes", &url]);
    let shown = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}{}", text(&out.stderr));
    let port = cluster.ports()[0];
    assert!(shown.contains("Redis Cluster, primaries 127.0.0.1:"), "{shown}");
    assert!(shown.contains(&format!("127.0.0.1:{port} (slots ")), "{shown}");
    for row in ["\n1 ", "\n1.1 ", "\n1.2 ", "\n1.3 "] {
        assert!(shown.contains(row), "row {row:?}: {shown}");
    }
}

#[test]
fn check_names_a_sentinel_members_master_and_probes_it() {
    let members = members();
    let url = members.sentinel.url();
    let out = output(&["check", "--nodes", &url]);
    let shown = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}{}", text(&out.stderr));
    let port = members.master().port();
    assert!(
        shown.contains(&format!("Sentinel master quorumlock at 127.0.0.1:{port}")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("127.0.0.1:{port}/0")),
        "the master's row: {shown}"
    );
    assert!(!shown.contains("CLUSTER SLOTS"), "{shown}");
}

/// `redis-cli -p PORT ARGS` on one server, its reply trimmed.
fn on_server(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    text(&out.stdout).trim().to_owned()
}

#[test]
fn check_reports_a_primary_whose_user_may_not_run_cluster_slots() {
    let members = members();
    let cluster = &members.clusters[0];
    let ports = cluster.ports();
    // ACLs are each server's own: only the last primary denies the command,
    // so the cluster's layout is still learnt from the others.
    for (i, &port) in ports.iter().enumerate() {
        let rules: &[&str] = if i == 2 {
            &["+@all", "-cluster|slots"]
        } else {
            &["+@all"]
        };
        let setuser = [
            &["ACL", "SETUSER", "noslots", "reset", "on", ">pw", "~*", "&*"][..],
            rules,
        ]
        .concat();
        assert_eq!(on_server(port, &setuser), "OK", "ACL SETUSER on {port}");
    }
    let seeds: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let url = format!("redis+cluster://noslots:pw@{}", seeds.join(","));
    let nodes_file = scratch("members-acl").join("nodes");
    std::fs::write(&nodes_file, &url).expect("nodes file");
    std::fs::set_permissions(&nodes_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod 600");

    let out = output(&[
        "check",
        "--nodes-file",
        &nodes_file.display().to_string(),
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a warning: {}{}",
        stdout(&out),
        text(&out.stderr)
    );
    let report = parsed(&out);
    let servers = report["nodes"][0]["servers"].as_array().expect("servers").clone();
    let denied = servers
        .iter()
        .find(|s| s["node"] == format!("127.0.0.1:{}/0", ports[2]));
    let denied = denied.unwrap_or_else(|| panic!("the last primary is probed: {report:#}"));
    assert_eq!(
        denied["missing_permissions"],
        serde_json::json!(["CLUSTER SLOTS"]),
        "{report:#}"
    );
    let others = servers
        .iter()
        .filter(|s| s["missing_permissions"] == serde_json::json!([]));
    assert_eq!(others.count(), 2, "{report:#}");
    assert!(!stdout(&out).contains("pw@"), "no password shown");
    let _ = std::fs::remove_dir_all(nodes_file.parent().expect("scratch dir"));
}
