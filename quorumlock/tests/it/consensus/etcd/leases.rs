//! etcd leases count whole seconds: a ttl between two is rounded up, so
//! that a lock lasts at least as long as asked.

use quorumlock_testkit::etcd::EtcdCluster;
use tokio::time::Instant;

use crate::consensus::ms;
use crate::consensus::store::Space;

// Blocking looks at the store: see `conformance_suite!`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_between_whole_seconds_is_rounded_up_for_the_lease_and_the_validity() {
    let space = Space::<EtcdCluster>::shared("rounded");
    let redlock = space.client();
    let asked = Instant::now();
    let guard = redlock.try_lock("r", ms(1500)).await.unwrap().expect("free");
    // Valid from the lease's request for its 2 s, less the drift allowance.
    assert!(guard.valid_until() > asked + ms(1500), "{:?}", guard.remaining());
    let line = space.line("r");
    let [key] = line.as_slice() else {
        panic!("one key expected: {line:?}")
    };
    // The key is named after its lease, in hex.
    let lease = key.rsplit('/').next().unwrap();
    let lease = space.store().etcdctl(&["lease", "timetolive", lease]).unwrap();
    assert!(lease.contains("granted with TTL(2s)"), "{lease}");
    guard.release().await.unwrap();
}
