//! Locks shared with `etcdctl lock` (etcd's own `concurrency.Mutex`): both
//! see the other's keys in one line, so that a fleet can mix them.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::Redlock;
use quorumlock_testkit::etcd::EtcdCluster;

use super::{TTL, ms};

/// Rounds of each side.
const ROUNDS: usize = 4;

/// How long each holder stays inside.
const HOLD: Duration = Duration::from_millis(150);

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// `etcdctl lock NAME` running a command that appends its start and end
/// (wall clock, ns) to `file`.
fn etcdctl_holds(cluster: &EtcdCluster, name: &str, file: &std::path::Path) {
    let script = format!(
        "echo start $(date +%s%N) >> {f}; sleep {s}; echo end $(date +%s%N) >> {f}",
        f = file.display(),
        s = HOLD.as_secs_f64()
    );
    let status = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.endpoints()))
        .args(["lock", name, "--", "sh", "-c", &script])
        .status()
        .expect("etcdctl runs");
    assert!(status.success(), "etcdctl lock failed: {status}");
}

/// Intervals `(start, end)` from the lines `start NS` / `end NS`.
fn intervals(text: &str) -> Vec<(u128, u128)> {
    let numbers: Vec<u128> = text
        .lines()
        .map(|line| {
            line.split_whitespace()
                .nth(1)
                .expect("a time")
                .parse()
                .expect("ns")
        })
        .collect();
    numbers.chunks(2).map(|pair| (pair[0], pair[1])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorumlock_and_etcdctl_lock_exclude_each_other() {
    let cluster = Arc::new(EtcdCluster::start(1));
    let dir = std::env::temp_dir().join(format!("quorumlock-etcd-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("etcdctl.log");
    let etcdctl = {
        let (cluster, file) = (Arc::clone(&cluster), file.clone());
        std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                etcdctl_holds(&cluster, "shared", &file);
            }
        })
    };
    let ours = Arc::new(Mutex::new(Vec::new()));
    let contenders: Vec<_> = (0..2)
        .map(|_| {
            let (redlock, ours) = (
                Redlock::builder()
                    .node(cluster.url())
                    .wait(Duration::from_secs(20))
                    .build()
                    .unwrap(),
                Arc::clone(&ours),
            );
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = redlock.lock("shared", TTL).await.expect("taken");
                    let start = now_ns();
                    tokio::time::sleep(HOLD).await;
                    assert!(guard.is_held());
                    ours.lock().unwrap().push((start, now_ns()));
                    guard.release().await.unwrap();
                    tokio::time::sleep(ms(20)).await;
                }
            })
        })
        .collect();
    for contender in contenders {
        contender.await.unwrap();
    }
    etcdctl.join().unwrap();
    let mut all = intervals(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(all.len(), ROUNDS, "every etcdctl round ran its command");
    all.extend(ours.lock().unwrap().iter().copied());
    all.sort_unstable();
    for pair in all.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "two holders at once: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
    assert!(cluster.keys("shared/").is_empty(), "{:?}", cluster.keys(""));
    std::fs::remove_dir_all(&dir).unwrap();
}
