//! Locks shared with `etcdctl lock` (etcd's own `concurrency.Mutex`): both
//! see the other's keys in one line, so that a fleet can mix them.

use std::path::Path;
use std::process::Command;

use quorumlock_testkit::etcd::EtcdCluster;

use crate::consensus::interop::{INSIDE, ROUNDS, quorumlock_and_another_client_exclude_each_other};
use crate::consensus::store::Space;

/// `etcdctl lock NAME` on `endpoints`, once per round, each running a
/// command that appends its start and end (wall clock, ns) to `file`.
fn etcdctl_holds(endpoints: &str, name: &str, file: &Path) -> Vec<Command> {
    let script = format!(
        "echo start $(date +%s%N) >> {f}; sleep {s}; echo end $(date +%s%N) >> {f}",
        f = file.display(),
        s = INSIDE.as_secs_f64()
    );
    let round = || {
        let mut etcdctl = Command::new("etcdctl");
        etcdctl
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"));
        etcdctl.args(["lock", name, "--", "sh", "-c", &script]);
        etcdctl
    };
    (0..ROUNDS).map(|_| round()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorumlock_and_etcdctl_lock_exclude_each_other() {
    let space = Space::<EtcdCluster>::shared("etcdctl");
    let (endpoints, name) = (space.store().endpoints(), space.path("shared"));
    quorumlock_and_another_client_exclude_each_other(&space, "shared", move |file| {
        etcdctl_holds(&endpoints, &name, file)
    })
    .await;
}
