//! The etcd harness against real `etcd` members: a 3-member cluster
//! serves reads and writes, elects a new leader when its leader is killed
//! and takes the old one back, and keeps serving while a follower is frozen.

use std::time::{Duration, Instant};

use quorumlock_testkit::etcd::EtcdCluster;

use crate::{hosts_of_three, wait_until};

/// How long a new leader may take after the old one is killed: a few
/// election timeouts, with room for a loaded CI machine.
const ELECTION_LIMIT: Duration = Duration::from_secs(5);

/// The members' endpoints other than member `i`'s, for etcdctl.
fn endpoints_except(cluster: &EtcdCluster, i: usize) -> String {
    let others: Vec<String> = (0..cluster.len())
        .filter(|&j| j != i)
        .map(|j| format!("127.0.0.1:{}", cluster.client_port(j)))
        .collect();
    others.join(",")
}

#[test]
fn three_members_put_and_get() {
    let cluster = EtcdCluster::start(3);
    let ports = hosts_of_three(&cluster);
    assert!(cluster.pids().iter().all(Option::is_some));
    assert_eq!(cluster.endpoints(), ports.join(","));
    assert_eq!(cluster.member_url(1), format!("etcd://{}", ports[1]));

    assert_eq!(
        cluster.etcdctl(&["put", "kit/a", "one"]).expect("put").trim(),
        "OK"
    );
    let got = cluster
        .etcdctl(&["get", "kit/a", "--print-value-only"])
        .expect("get");
    assert_eq!(got.trim(), "one");
    cluster.etcdctl(&["put", "kit/b", "two"]).expect("put");
    assert_eq!(cluster.keys("kit/"), ["kit/a", "kit/b"]);
    assert!(cluster.keys("other/").is_empty());
}

#[test]
fn killed_leader_is_replaced_and_rejoins() {
    let mut cluster = EtcdCluster::start(3);
    let old = cluster.leader();
    cluster.kill(old);
    assert!(!cluster.is_running(old));
    assert_eq!(cluster.pids()[old], None);

    let killed_at = Instant::now();
    let mut new = None;
    wait_until("a new leader among the survivors", ELECTION_LIMIT, || {
        new = Some(cluster.leader()).filter(|&l| l != old);
        new.is_some()
    });
    let new = new.expect("a new leader");
    eprintln!(
        "new leader m{new} after {:?} (old leader m{old} killed)",
        killed_at.elapsed()
    );
    assert!(cluster.is_running(new));
    cluster
        .etcdctl(&["put", "kit/after-kill", "x"])
        .expect("put with the leader dead");

    cluster.restart(old);
    assert!(cluster.is_running(old));
    wait_until("all 3 members are healthy", ELECTION_LIMIT, || {
        cluster.etcdctl(&["endpoint", "health"]).is_ok()
    });
    let member_list = cluster.etcdctl(&["member", "list"]).expect("member list");
    assert_eq!(member_list.lines().count(), 3, "{member_list}");
    // The restarted member has the write it missed while dead.
    let at_old = format!("--endpoints=127.0.0.1:{}", cluster.client_port(old));
    wait_until("the restarted member has caught up", ELECTION_LIMIT, || {
        cluster
            .etcdctl(&[
                &at_old,
                "get",
                "kit/after-kill",
                "--print-value-only",
                "--consistency=s",
            ])
            .is_ok_and(|v| v.trim() == "x")
    });
}

#[test]
fn put_works_while_a_follower_is_paused() {
    let cluster = EtcdCluster::start(3);
    let leader = cluster.leader();
    let follower = (leader + 1) % 3;
    let paused = cluster.pause(follower);
    let others = format!("--endpoints={}", endpoints_except(&cluster, follower));
    for n in 0..5 {
        let key = format!("kit/paused/{n}");
        let reply = cluster
            .etcdctl(&[&others, "put", &key, "v"])
            .expect("put with a follower frozen");
        assert_eq!(reply.trim(), "OK");
    }
    assert_eq!(
        cluster.leader(),
        leader,
        "a frozen follower does not unseat the leader"
    );
    paused.resume();
    wait_until(
        "all 3 members are healthy after the resume",
        ELECTION_LIMIT,
        || cluster.etcdctl(&["endpoint", "health"]).is_ok(),
    );
    assert_eq!(cluster.keys("kit/paused/").len(), 5);
}
