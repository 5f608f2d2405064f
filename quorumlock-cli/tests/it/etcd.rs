//! The `quorumlock` binary on an etcd cluster (feature `etcd`): `run`
//! beside `etcdctl lock` on one name, a holder stopped past its lease,
//! `check` on a partial member list, and the bodies shared with ZooKeeper
//! ([`crate::consensus`]) with the etcd cases on top: `status`, `unlock
//! --token` and `check --key` on a held lock, and `check` on a healthy, a
//! degraded and a broken cluster. Against real etcd members.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock_testkit::cli::{exit, scratch, stat, text, wait_for_line};
use quorumlock_testkit::etcd::EtcdCluster;

use crate::consensus::{
    self, QUORUMLOCK, START_LIMIT, assert_disjoint, intervals, quorumlock, recorded, run, with_nodes_flag,
};

consensus::store!(EtcdCluster {
    name: "etcd",
    fit: "all members fit for an etcd lock",
    alone: " leader ",
    nodes: EtcdCluster::url,
    // A lock's keys are `KEY/<lease>`, each with the holder's token.
    entries: |cluster: &EtcdCluster, key: &str| {
        let prefix = format!("{key}/");
        let values = cluster.etcdctl(&["get", &prefix, "--prefix", "--print-value-only"]);
        let values = values.unwrap_or_else(|e| panic!("the values under {prefix:?}: {e}"));
        values
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    },
});

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

#[test]
fn status_and_check_show_the_holder_and_unlock_with_its_token_frees_the_lock() {
    consensus::held_lock_is_shown_and_freed::<EtcdCluster>(|token| ["--token", token]);
}

#[test]
fn run_and_etcdctl_lock_on_one_name_never_overlap() {
    let cluster = EtcdCluster::start(3);
    let dir = scratch("etcd-interop");
    let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
    let runs: Vec<_> = (0..4)
        .map(|_| {
            with_nodes_flag(
                &cluster,
                &["run", "--key", "shared", "--ttl", "5s", "--wait", "20s"],
            )
            .args(["--", "sh", "-c", &recorded(&ours, 0.2)])
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn quorumlock")
        })
        .collect();
    // etcdctl takes etcd's own lock on the name (keys `shared/<lease>`, the
    // lowest create revision holds), one after another, while the runs
    // queue on the same keys.
    let endpoints = cluster.endpoints();
    let etcdctl = std::thread::spawn(move || {
        (0..4)
            .map(|_| {
                Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .arg(format!("--endpoints={endpoints}"))
                    .args(["lock", "shared", "--", "sh", "-c", &recorded(&theirs, 0.2)])
                    .stdout(Stdio::null())
                    .status()
                    .expect("run etcdctl")
            })
            .collect::<Vec<_>>()
    });
    for mut run in runs {
        let status = run.wait().expect("quorumlock exits");
        assert!(status.success(), "quorumlock run: {status}");
    }
    for status in etcdctl.join().expect("the etcdctl loop") {
        assert!(status.success(), "etcdctl lock: {status}");
    }
    let all = intervals(&[&dir.join("ours"), &dir.join("theirs")], Some(now_ns()));
    assert_eq!(all.len(), 8, "every command ran once: {all:?}");
    assert_disjoint(&all);
    assert!(cluster.keys("shared/").is_empty(), "{:?}", cluster.keys(""));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Watches process `pid` every millisecond on a thread until it has ended
/// (gone or a zombie), and gives the wall-clock times (ns) it was last
/// seen alive and first seen ended: its death lies between them.
fn watch_death(pid: u32) -> std::thread::JoinHandle<(u128, u128)> {
    std::thread::spawn(move || {
        let mut alive = now_ns();
        loop {
            let ended = stat(pid).is_none_or(|p| matches!(p.state, 'Z' | 'X'));
            let now = now_ns();
            if ended {
                return (alive, now);
            }
            alive = now;
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

#[test]
fn a_holder_stopped_past_its_lease_has_its_command_killed_before_the_next_holder_starts() {
    let cluster = EtcdCluster::start(3);
    let dir = scratch("etcd-stopped");
    let (first_log, second_log, pgid_file) = (dir.join("first"), dir.join("second"), dir.join("pgid"));
    // The shell is the command's process group leader: its death is the
    // group's (the guardian kills the whole group at once).
    let first_command = format!(
        "echo $$ > {}; {}",
        pgid_file.display(),
        recorded(&first_log, 30.0)
    );
    let mut first = run(&cluster, &["--key", "stopped", "--ttl", "2s"], &first_command);
    let pgid: u32 = wait_for_line(&pgid_file, START_LIMIT).parse().expect("pid");
    first.group = Some(pgid);
    let death = watch_death(pgid);
    // quorumlock itself, not its command: its keep-alive stops, the lease
    // runs out, and only the guardian is left to act.
    first.signal("STOP");
    let stopped_at = now_ns();
    let mut second = run(
        &cluster,
        &["--key", "stopped", "--ttl", "2s", "--wait", "15s"],
        &recorded(&second_log, 0.2),
    );
    let (last_alive, seen_dead) = death.join().expect("watcher");
    assert!(
        seen_dead - stopped_at < 3_000_000_000,
        "the guardian took {} ms to kill the stopped holder's command",
        (seen_dead - stopped_at) / 1_000_000
    );
    let status = second.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "second run: {}", second.stderr());
    let first_text = std::fs::read_to_string(&first_log).unwrap();
    assert!(
        !first_text.contains("end"),
        "the killed command ended itself: {first_text}"
    );
    let second_start = intervals(&[&second_log], None)[0].0;
    assert!(
        second_start > last_alive,
        "the second command started {} ms before the first was last seen alive",
        (last_alive - second_start) / 1_000_000
    );
    eprintln!(
        "killed {}..{} ms after SIGSTOP, second command started {} ms after the kill",
        (last_alive - stopped_at) / 1_000_000,
        (seen_dead - stopped_at) / 1_000_000,
        (second_start as i128 - seen_dead as i128) / 1_000_000
    );
    let all = intervals(&[&first_log, &second_log], Some(seen_dead));
    assert_eq!(all.len(), 2, "{all:?}");
    first.signal("CONT");
    let status = first.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(exit::LOST), "{}", first.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_lists_every_member_and_follows_the_redis_rules_on_dead_ones() {
    let (mut cluster, follower, _) =
        consensus::check_lists_every_server_and_reports_a_dead_follower::<EtcdCluster>();
    // A second one dead: no majority.
    let other = (0..3).find(|&i| i != follower && i != cluster.leader()).unwrap();
    cluster.kill(other);
    let broken = quorumlock(&cluster, &["check", "--timeout", "1s"])
        .output()
        .unwrap();
    let shown = text(&broken.stdout);
    assert_eq!(broken.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("only 1 of the cluster's 3 members answer"),
        "{shown}"
    );
}

#[test]
fn check_warns_about_a_partial_member_list() {
    let cluster = EtcdCluster::start(3);
    // `check ARGS` on the first member alone: its status and its stdout.
    let check_one = |args: &[&str]| {
        let output = QUORUMLOCK
            .command(&[])
            .arg("check")
            .args(args)
            .args(["--nodes", &cluster.member_url(0)])
            .output()
            .unwrap();
        (output.status.code(), text(&output.stdout))
    };
    let (status, shown) = check_one(&[]);
    assert_eq!(status, Some(0), "a warning only: {shown}");
    assert!(
        shown.contains("1 of the cluster's 3 members are listed"),
        "{shown}"
    );
    let (status, shown) = check_one(&["--strict", "--json"]);
    assert_eq!(status, Some(1), "{shown}");
    assert!(shown.contains("\"members_missing\""), "{shown}");
}
