//! The ZooKeeper harness against real servers: a 3-server ensemble has
//! one leader, elects another when its leader is killed or paused, and
//! takes the old one back; a kazoo client's ephemeral sequential znode
//! shows in `children`, and goes with its session; one server runs
//! standalone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::zookeeper::ZkEnsemble;

/// How long a new leader may take after the old one is killed: followers
/// notice after half a second, and the election itself takes a few
/// hundred milliseconds; the rest is room for a loaded CI machine.
const ELECTION_LIMIT: Duration = Duration::from_secs(10);

/// Polls `condition` every 20 ms until it holds; panics naming `what` once
/// `limit` has passed.
fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What server `i`'s `srvr` says its mode is, or `None` when it does not
/// answer or does not serve: the test's own probe, independent of the
/// harness's.
fn mode(zk: &ZkEnsemble, i: usize) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", zk.client_port(i))).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"srvr").ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let line = reply.lines().find_map(|l| l.strip_prefix("Mode: "))?;
    Some(line.trim().to_owned())
}

/// The modes of all servers.
fn modes(zk: &ZkEnsemble) -> Vec<Option<String>> {
    (0..zk.len()).map(|i| mode(zk, i)).collect()
}

/// Whether exactly one server leads and all others follow.
fn one_leader_rest_follow(modes: &[Option<String>]) -> bool {
    let leaders = modes.iter().filter(|m| m.as_deref() == Some("leader")).count();
    let followers = modes.iter().filter(|m| m.as_deref() == Some("follower")).count();
    leaders == 1 && leaders + followers == modes.len()
}

#[test]
fn three_servers_elect_a_new_leader_after_a_kill() {
    let started = Instant::now();
    let mut zk = ZkEnsemble::start(3);
    eprintln!("3-server ensemble serving after {:?}", started.elapsed());
    assert_eq!(zk.len(), 3);
    assert!(zk.pids().iter().all(Option::is_some));
    let hosts: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", zk.client_port(i)))
        .collect();
    assert_eq!(zk.connect_string(), hosts.join(","));
    assert_eq!(zk.url(), format!("zk://{}", hosts.join(",")));

    let all = modes(&zk);
    assert!(one_leader_rest_follow(&all), "modes: {all:?}");
    let old = zk.leader();
    assert_eq!(all[old].as_deref(), Some("leader"));

    let killed = Instant::now();
    zk.kill(old);
    assert!(!zk.is_running(old));
    assert_eq!(zk.pids()[old], None);
    assert_eq!(mode(&zk, old), None, "a killed server's port refuses");
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    wait_until("another server leads", ELECTION_LIMIT, || {
        others.iter().any(|&i| mode(&zk, i).as_deref() == Some("leader"))
    });
    eprintln!("new leader elected {:?} after the kill", killed.elapsed());
    let new = zk.leader();
    assert_ne!(new, old);
    // A client given every server finds a live one.
    assert!(zk.children("/").contains(&"zookeeper".to_owned()));

    zk.restart(old);
    assert!(zk.is_running(old));
    wait_until("all three serve again", ELECTION_LIMIT, || {
        one_leader_rest_follow(&modes(&zk))
    });
    // The restarted server joins as a follower; the leader stays.
    assert_eq!(zk.leader(), new);
    assert!(zk.log(old).contains("FOLLOWING"), "log:\n{}", zk.log(old));
}

#[test]
fn children_lists_a_kazoo_clients_ephemeral_sequential_node() {
    let zk = ZkEnsemble::start(3);
    assert!(zk.children("/t").is_empty(), "no /t yet");
    // Creates the node, prints its path, and holds the session (and so
    // the node) until its stdin closes.
    let script = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=10)
print(zk.create("/t/lock-", b"", ephemeral=True, sequence=True, makepath=True), flush=True)
sys.stdin.read()
zk.stop()
"#;
    let mut client = Command::new("python3")
        .args(["-c", script, &zk.connect_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut created = String::new();
    BufReader::new(client.stdout.take().expect("stdout"))
        .read_line(&mut created)
        .expect("the created path");
    let name = created
        .trim()
        .strip_prefix("/t/")
        .expect("a node under /t")
        .to_owned();
    assert!(
        name.starts_with("lock-") && name.len() == "lock-".len() + 10,
        "{name:?}"
    );

    assert_eq!(zk.children("/t"), [name]);

    drop(client.stdin.take());
    assert!(client.wait().expect("python3").success());
    // The client closed its session: its ephemeral node is gone.
    assert!(zk.children("/t").is_empty());
}

#[test]
fn pausing_the_leader_elects_another_and_it_rejoins_as_a_follower() {
    let zk = ZkEnsemble::start(3);
    let old = zk.leader();
    let paused = zk.pause(old);
    assert!(zk.is_running(old), "a paused server runs");
    // The paused leader does not answer; the others elect a new one.
    let new = zk.leader();
    assert_ne!(new, old);
    paused.resume();
    wait_until("the old leader follows", ELECTION_LIMIT, || {
        one_leader_rest_follow(&modes(&zk))
    });
    assert_eq!(mode(&zk, old).as_deref(), Some("follower"));
}

#[test]
fn one_server_runs_standalone_and_pauses() {
    let mut zk = ZkEnsemble::start(1);
    assert_eq!(mode(&zk, 0).as_deref(), Some("standalone"));
    assert_eq!(zk.leader(), 0);
    assert_eq!(zk.children("/zookeeper"), ["config", "quota"]);
    assert!(zk.children("/missing").is_empty());

    let paused = zk.pause(0);
    assert_eq!(mode(&zk, 0), None, "a paused server does not answer");
    paused.resume();
    assert_eq!(mode(&zk, 0).as_deref(), Some("standalone"));

    let pid = zk.pids()[0];
    zk.restart(0);
    assert_ne!(zk.pids()[0], pid);
    assert_eq!(zk.leader(), 0);
}
