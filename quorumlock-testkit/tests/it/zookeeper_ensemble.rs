//! The ZooKeeper harness against real servers: a 3-server ensemble has
//! one leader, elects another when its leader is killed or paused, and
//! takes the old one back; a kazoo client's ephemeral sequential znode
//! shows in `children`, and goes with its session; one server runs
//! standalone; each chaos action of a `ConsensusTarget` does what it
//! says, as a kazoo client behind the target's proxies sees it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::consensus_chaos::{ConsensusAction, ConsensusTarget};
use quorumlock_testkit::faults::Target;
use quorumlock_testkit::pause::Paused;
use quorumlock_testkit::zookeeper::ZkEnsemble;

use crate::{hosts_of_three, wait_until};

/// The chaos target over a ZooKeeper ensemble.
type ZkTarget = ConsensusTarget<ZkEnsemble>;

/// How long a new leader may take after the old one is killed: followers
/// notice after half a second, and the election itself takes a few
/// hundred milliseconds; the rest is room for a loaded CI machine.
const ELECTION_LIMIT: Duration = Duration::from_secs(10);

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
    let hosts = hosts_of_three(&zk);
    assert!(zk.pids().iter().all(Option::is_some));
    assert_eq!(zk.connect_string(), hosts.join(","));

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
    let paused: Paused = zk.pause(old);
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

/// How long a server that serves may take to answer a kazoo client's
/// connect and write (a client retries a server that is not serving yet,
/// e.g. one rejoining the ensemble, until then): room for a loaded CI
/// machine.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// How long a server that must not answer is given to answer anyway: a
/// serving one answers a connect within milliseconds, and a silent one
/// never does, so waiting longer would show nothing more.
const SILENCE: Duration = Duration::from_secs(2);

/// For each host of `argv[2:]` alone, in turn: whether a kazoo client
/// connects within `argv[1]` seconds and commits a sequential znode (a
/// write needs the whole way: the proxy, the server, and a quorum with a
/// leader behind it). Prints `serves` or `silent`, one line per host.
const PROBE_SCRIPT: &str = r#"
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.handlers.threading import KazooTimeoutError
timeout = float(sys.argv[1])
def serves(host):
    zk = KazooClient(hosts=host, timeout=timeout)
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        return False
    try:
        zk.create_async("/chaos/probe-", b"", sequence=True, makepath=True).get(timeout=timeout)
        return True
    except (KazooTimeoutError, ConnectionLoss):
        return False
    finally:
        zk.stop()
        zk.close()
for host in sys.argv[2:]:
    print("serves" if serves(host) else "silent", flush=True)
"#;

/// Whether a kazoo client given only `127.0.0.1:port` gets a write through
/// within `limit`, for each of `ports`.
fn serves(ports: &[u16], limit: Duration) -> Vec<bool> {
    let output = Command::new("python3")
        .args(["-c", PROBE_SCRIPT, &limit.as_secs_f64().to_string()])
        .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answers: Vec<bool> = stdout.lines().map(|l| l == "serves").collect();
    assert!(
        output.status.success() && answers.len() == ports.len(),
        "kazoo probe of {ports:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    answers
}

/// The ports of the proxies in front of `servers`.
fn proxy_ports(target: &ZkTarget, servers: impl IntoIterator<Item = usize>) -> Vec<u16> {
    servers.into_iter().map(|i| target.proxy_port(i)).collect()
}

/// The ports of the proxies in front of every server but `i`.
fn proxy_ports_except(target: &ZkTarget, i: usize) -> Vec<u16> {
    proxy_ports(target, (0..target.members.len()).filter(|&j| j != i))
}

/// CutOff silences one server's proxy only; Reconnect brings it back.
fn cut_off_and_reconnect(target: &mut ZkTarget) {
    let cut = 1;
    target.apply(&ConsensusAction::CutOff(cut));
    assert!(target.is_degraded());
    assert_eq!(serves(&[target.proxy_port(cut)], SILENCE), [false]);
    assert_eq!(
        serves(&proxy_ports_except(target, cut), ANSWER_LIMIT),
        [true, true]
    );
    // Cut off from the clients, not from the ensemble: it still serves
    // a client that reaches it directly.
    let direct = target.members.client_port(cut);
    assert_eq!(serves(&[direct], ANSWER_LIMIT), [true]);

    target.apply(&ConsensusAction::Reconnect);
    assert!(!target.is_degraded());
    assert_eq!(serves(&[target.proxy_port(cut)], ANSWER_LIMIT), [true]);
}

/// KillFollower keeps the leader, KillLeader has the others elect a new
/// one, and StartKilled brings each killed server back.
fn kill_and_start(target: &mut ZkTarget) {
    let leader = target.members.leader();
    target.apply(&ConsensusAction::KillFollower);
    assert!(target.is_degraded());
    let follower = (0..3)
        .find(|&i| !target.members.is_running(i))
        .expect("a killed server");
    assert_ne!(follower, leader);
    assert_eq!(
        target.members.leader(),
        leader,
        "a follower's death keeps the leader"
    );
    assert_eq!(
        serves(&proxy_ports_except(target, follower), ANSWER_LIMIT),
        [true, true]
    );
    target.apply(&ConsensusAction::StartKilled);
    assert!(target.members.is_running(follower));
    assert!(!target.is_degraded());

    let elected = Instant::now();
    target.apply(&ConsensusAction::KillLeader);
    assert!(!target.members.is_running(leader));
    // Waits for the survivors to agree on a leader among themselves.
    let new = target.members.leader();
    assert_ne!(new, leader);
    eprintln!("s{new} leads {:?} after s{leader} was killed", elected.elapsed());
    assert_eq!(
        serves(&proxy_ports_except(target, leader), ANSWER_LIMIT),
        [true, true]
    );
    target.apply(&ConsensusAction::StartKilled);
    assert!(!target.is_degraded());
    assert_eq!(
        target.members.leader(),
        new,
        "the old leader rejoins as a follower"
    );
    assert_eq!(serves(&proxy_ports(target, 0..3), ANSWER_LIMIT), [true; 3]);
}

/// PauseLeader silences the leader and has the others elect a new one;
/// ResumeAll brings it back as a follower.
fn pause_and_resume(target: &mut ZkTarget) {
    let leader = target.members.leader();
    target.apply(&ConsensusAction::PauseLeader);
    assert!(target.members.is_running(leader), "a paused server runs");
    assert!(target.is_degraded());
    // The paused leader does not answer `srvr`, so this is the others'.
    let new = target.members.leader();
    assert_ne!(new, leader);
    assert_eq!(serves(&[target.proxy_port(leader)], SILENCE), [false]);
    assert_eq!(
        serves(&proxy_ports_except(target, leader), ANSWER_LIMIT),
        [true, true]
    );

    target.apply(&ConsensusAction::ResumeAll);
    assert!(!target.is_degraded());
    // Waits until the resumed server serves again, under the new leader.
    assert_eq!(target.members.leader(), new);
    assert_eq!(serves(&proxy_ports(target, 0..3), ANSWER_LIMIT), [true; 3]);
}

#[test]
fn each_chaos_action_has_its_effect_on_three_servers() {
    let started = Instant::now();
    // The proxies run on this runtime's worker while the test thread
    // blocks in the ensemble's calls and the kazoo probes.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _proxies_run_here = runtime.enter();
    let mut target = ConsensusTarget::new(ZkEnsemble::start(3));
    let hosts: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", target.proxy_port(i)))
        .collect();
    assert_eq!(target.urls(), [format!("zk://{}", hosts.join(","))]);
    assert_eq!(target.connect_string(), hosts.join(","));
    assert!((0..3).all(|i| target.proxy_port(i) != target.members.client_port(i)));
    assert!(!target.is_degraded());
    assert_eq!(serves(&proxy_ports(&target, 0..3), ANSWER_LIMIT), [true; 3]);

    cut_off_and_reconnect(&mut target);
    kill_and_start(&mut target);
    pause_and_resume(&mut target);
    eprintln!(
        "every chaos action applied and checked in {:?}",
        started.elapsed()
    );
}

#[test]
fn chaos_actions_read_as_what_they_do() {
    let cases = [
        (
            ConsensusAction::KillLeader,
            "kill the leader",
            "kill leader",
            true,
        ),
        (
            ConsensusAction::KillFollower,
            "kill a follower",
            "kill follower",
            true,
        ),
        (
            ConsensusAction::StartKilled,
            "start the killed members",
            "start",
            false,
        ),
        (
            ConsensusAction::PauseLeader,
            "pause the leader",
            "pause leader",
            true,
        ),
        (
            ConsensusAction::ResumeAll,
            "resume the paused members",
            "resume",
            false,
        ),
        (
            ConsensusAction::CutOff(2),
            "cut member 2 off from the clients",
            "cut off",
            true,
        ),
        (
            ConsensusAction::Reconnect,
            "reconnect every member",
            "reconnect",
            false,
        ),
    ];
    for (action, text, kind, is_fault) in cases {
        assert_eq!(action.to_string(), text);
        assert_eq!(ZkTarget::kind(&action), kind);
        assert_eq!(ZkTarget::is_fault(&action), is_fault, "{action}");
    }
}
