//! Locks shared with python's kazoo `Lock` (the ZooKeeper lock recipe as
//! Python services take it): each sees the other's nodes in one line, so a
//! fleet can mix them.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::Redlock;
use quorumlock_testkit::zookeeper::ZkEnsemble;

use super::{TTL, ms, url};

/// Rounds of each side.
const ROUNDS: usize = 4;

/// How long each holder stays inside.
const HOLD: Duration = Duration::from_millis(150);

/// A kazoo contender: takes `Lock(path)` `rounds` times, appending the
/// start and end of each hold (wall clock, ns) to `file`.
const KAZOO_CONTENDER: &str = r#"
import sys, time
from kazoo.client import KazooClient
hosts, path, rounds, hold, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start(timeout=10)
lock = zk.Lock(path, "kazoo")
for _ in range(rounds):
    with lock:
        start = time.time_ns()
        time.sleep(hold)
        end = time.time_ns()
    with open(out, "a") as f:
        f.write(f"start {start}\nend {end}\n")
    time.sleep(0.02)
zk.stop()
"#;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
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
async fn quorumlock_and_kazoo_lock_exclude_each_other() {
    let zk = ZkEnsemble::start(1);
    let dir = std::env::temp_dir().join(format!("quorumlock-zk-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kazoo.log");
    let kazoo = {
        let (hosts, file) = (zk.connect_string(), file.clone());
        std::thread::spawn(move || {
            let status = Command::new("python3")
                .args(["-c", KAZOO_CONTENDER, &hosts, "/shared"])
                .arg(ROUNDS.to_string())
                .arg(HOLD.as_secs_f64().to_string())
                .arg(&file)
                .status()
                .expect("python3 runs");
            assert!(status.success(), "the kazoo contender failed: {status}");
        })
    };
    let ours = Arc::new(Mutex::new(Vec::new()));
    let contenders: Vec<_> = (0..2)
        .map(|_| {
            let redlock = Redlock::builder()
                .node(url(&zk))
                .wait(Duration::from_secs(20))
                .build()
                .unwrap();
            let ours = Arc::clone(&ours);
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
    kazoo.join().unwrap();
    let mut all = intervals(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(all.len(), ROUNDS, "every kazoo round held the lock");
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
    assert!(zk.children("/shared").is_empty(), "{:?}", zk.children("/shared"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// kazoo's `contenders()` lists quorumlock's waiters and holder by the
/// identifiers in their nodes: each side reads the other's line.
#[tokio::test]
async fn kazoo_sees_quorumlock_holders_in_its_line() {
    let zk = ZkEnsemble::start(1);
    let redlock = Redlock::builder().node(url(&zk)).build().unwrap();
    let guard = redlock.try_lock("seen", TTL).await.unwrap().expect("free");
    let script = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=10)
print("\n".join(zk.Lock("/seen").contenders()))
zk.stop()
"#;
    let output = Command::new("python3")
        .args(["-c", script, &zk.connect_string()])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), guard.token());
    guard.release().await.unwrap();
}
