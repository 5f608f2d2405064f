//! Locks shared with python's kazoo `Lock` (the ZooKeeper lock recipe as
//! Python services take it): each sees the other's nodes in one line, so a
//! fleet can mix them.

use std::path::Path;
use std::process::Command;

use quorumlock_testkit::zookeeper::ZkEnsemble;

use crate::consensus::TTL;
use crate::consensus::interop::{INSIDE, ROUNDS, quorumlock_and_another_client_exclude_each_other};
use crate::consensus::store::Space;

use super::python;

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

/// [`KAZOO_CONTENDER`] on the ensemble `hosts` for the znode `path`.
fn kazoo_holds(hosts: &str, path: &str, file: &Path) -> Command {
    let mut python = Command::new("python3");
    python.args(["-c", KAZOO_CONTENDER, hosts, path]);
    python
        .arg(ROUNDS.to_string())
        .arg(INSIDE.as_secs_f64().to_string());
    python.arg(file);
    python
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorumlock_and_kazoo_lock_exclude_each_other() {
    let space = Space::<ZkEnsemble>::shared("kazoo");
    let (hosts, path) = (space.store().connect_string(), space.path("shared"));
    quorumlock_and_another_client_exclude_each_other(&space, "shared", move |file| {
        vec![kazoo_holds(&hosts, &path, file)]
    })
    .await;
}

/// kazoo's `contenders()` lists quorumlock's waiters and holder by the
/// identifiers in their nodes: each side reads the other's line.
// Blocking looks at the store: see `conformance_suite!`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_sees_quorumlock_holders_in_its_line() {
    let space = Space::<ZkEnsemble>::shared("kazoo-line");
    let redlock = space.client();
    let guard = redlock.try_lock("seen", TTL).await.unwrap().expect("free");
    let script = r#"
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=10)
print("\n".join(zk.Lock(sys.argv[2]).contenders()))
zk.stop()
"#;
    let contenders = python(script, &[&space.store().connect_string(), &space.path("seen")]);
    assert_eq!(contenders, [guard.token()]);
    guard.release().await.unwrap();
}
