//! The suite on etcd members started by the test kit, and what only etcd
//! does: sharing locks with `etcdctl lock` ([`interop`]) and leases of
//! whole seconds ([`leases`]).

mod interop;
mod leases;

use std::time::Duration;

use quorumlock_testkit::etcd::EtcdCluster;

use super::store::Store;

/// A lock's keys are `concurrency.Mutex`'s: `<prefix><resource>/<lease>`,
/// the namespace being the URL's key prefix.
impl Store for EtcdCluster {
    const NAME: &'static str = "etcd";
    // No session: a lock's lease lasts the lock's ttl.
    const SHORT_SESSION_QUERY: &'static str = "";
    // A lease keeps the ttl asked for (in whole seconds), beyond the 2 s
    // the lock was taken with.
    const EXTEND_TO: Duration = Duration::from_secs(4);
    const LEFT_AFTER_EXTEND: Duration = Duration::from_secs(3);
    // The lease of a kept lock ends within a second (its unit) past the
    // hold, and the member notices within its expiry check.
    const MIN_HOLD_SLACK: Option<Duration> = Some(Duration::from_millis(1500));

    fn resource_path(space: &str, resource: &str) -> String {
        format!("{space}/{resource}")
    }

    fn line(&self, path: &str) -> Vec<String> {
        self.keys(&format!("{path}/"))
    }

    fn leftovers(&self, space: &str) -> Vec<String> {
        self.keys(&format!("{space}/"))
    }

    fn remove(&self, _path: &str, entry: &str) {
        self.etcdctl(&["del", entry]).unwrap();
    }
}

conformance_suite!(quorumlock_testkit::etcd::EtcdCluster);
