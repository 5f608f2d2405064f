//! The test kit's own integration tests, as one test binary: each former
//! `tests/*.rs` file is a module here, so that tokio, redis and the kit are
//! linked once rather than once per file. The helpers below are the
//! modules' own.

mod etcd_cluster;
mod redis_cluster;
mod zookeeper_ensemble;

use std::time::{Duration, Instant};

use quorumlock_testkit::consensus_chaos::Members;

/// Polls `condition` every 20 ms until it holds; panics naming `what` once
/// `limit` has passed. Blocking, for the harness's blocking calls (the
/// kit's `eventually` is its async twin).
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

/// The client addresses of the 3 members of `servers`, once its size and
/// its URL (`SCHEME://` and them, in order) are checked.
fn hosts_of_three<S: Members>(servers: &S) -> Vec<String> {
    assert_eq!(servers.len(), 3);
    let hosts: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", servers.client_port(i)))
        .collect();
    assert_eq!(servers.url(), format!("{}://{}", S::SCHEME, hosts.join(",")));
    hosts
}
