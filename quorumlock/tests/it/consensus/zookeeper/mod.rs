//! The suite on ZooKeeper servers started by the test kit, and what only
//! ZooKeeper does: sharing locks with python's kazoo ([`interop`]), the
//! session that bounds a lock, the sequential nodes of its line and the
//! chroot ([`sessions`]).

mod interop;
mod sessions;

use std::process::{Command, Stdio};
use std::time::Duration;

use quorumlock_testkit::zookeeper::ZkEnsemble;

use super::store::Store;

/// Runs `leftovers` and `delete` for the fixture (see the script).
const NODES_SCRIPT: &str = include_str!("nodes.py");

/// A lock's nodes are kazoo's: ephemeral sequential nodes under the znode
/// `<chroot>/<resource>`, the namespace being the URL's chroot.
impl Store for ZkEnsemble {
    const NAME: &'static str = "ZooKeeper";
    const SHORT_SESSION_QUERY: &'static str = "?session_timeout=2s";
    // The session vouches for two thirds of its 2 s after a heartbeat:
    // the extended validity stays within that.
    const EXTEND_TO: Duration = Duration::from_secs(2);
    const LEFT_AFTER_EXTEND: Duration = Duration::from_secs(1);
    const MIN_HOLD_SLACK: Option<Duration> = None;

    fn resource_path(space: &str, resource: &str) -> String {
        format!("/{space}/{resource}")
    }

    fn line(&self, path: &str) -> Vec<String> {
        self.children(path)
    }

    fn leftovers(&self, space: &str) -> Vec<String> {
        nodes(self, "leftovers", &format!("/{space}"))
    }

    fn remove(&self, path: &str, entry: &str) {
        nodes(self, "delete", &format!("{path}/{entry}"));
    }
}

/// The lines `nodes.py COMMAND PATH` prints.
fn nodes(ensemble: &ZkEnsemble, command: &str, path: &str) -> Vec<String> {
    python(NODES_SCRIPT, &[&ensemble.connect_string(), command, path])
}

/// The lines the python `script` prints when run with `args`; panics with
/// its stderr when it fails.
fn python(script: &str, args: &[&str]) -> Vec<String> {
    let output = Command::new("python3")
        .args(["-c", script])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python3 {args:?}: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

conformance_suite!(quorumlock_testkit::zookeeper::ZkEnsemble);
