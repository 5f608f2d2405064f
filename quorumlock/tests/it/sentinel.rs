//! Sentinel-managed members against real masters, replicas and sentinels
//! started by the test kit: a member follows a failover to the promoted
//! replica; with replica acknowledgement a held lock survives the failover,
//! without it the holder is told of the loss when the promoted replica
//! lacks the key.

use std::time::{Duration, Instant};

use quorumlock::{Redlock, ReplicaAck};
use quorumlock_testkit::get;
use quorumlock_testkit::sentinel::SentinelSetup;

/// The locks' ttl: longer than a failover takes (the kit's sentinels give up
/// on a master after a second, then elect and promote), so that a lock can
/// outlive one.
const TTL: Duration = Duration::from_secs(8);

/// How long the sentinels may take to name a new master.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

/// A client whose one member is `setup`'s master (quorum 1: the failover
/// is all that happens to the lock).
fn client(setup: &SentinelSetup, ack: Option<ReplicaAck>) -> Redlock {
    let mut builder = Redlock::builder()
        .node(setup.url())
        .node_timeout(Duration::from_secs(1))
        .wait(Duration::from_secs(10))
        .heal(false);
    if let Some(ack) = ack {
        builder = builder.replica_ack(ack);
    }
    builder.build().expect("a client over a Sentinel member")
}

/// Kills the master while `replicas_paused` (dropped here, which resumes
/// them) keep its replicas from reading its last writes, and waits until the
/// sentinels name another master; returns that master's index.
fn fail_over<T>(setup: &mut SentinelSetup, replicas_paused: T) -> usize {
    let old_port = setup.master_port();
    setup.kill(setup.master_index());
    drop(replicas_paused);
    let started = Instant::now();
    loop {
        let port = setup.master_port();
        if port != old_port {
            return setup.master_index();
        }
        assert!(
            started.elapsed() < FAILOVER_LIMIT,
            "no failover in {FAILOVER_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acknowledgement_a_held_lock_survives_a_failover_and_the_member_follows_it() {
    let mut setup = tokio::task::spawn_blocking(|| SentinelSetup::start(2, 3))
        .await
        .expect("sentinel set");
    let redlock = client(
        &setup,
        Some(ReplicaAck::new(1).with_timeout(Duration::from_millis(500))),
    );
    let guard = redlock
        .try_lock("sentinel:acked", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    let new_master = tokio::task::block_in_place(|| fail_over(&mut setup, ()));
    // Renewals reach the promoted replica, which has the key: confirmed.
    let renewed_by = Instant::now() + TTL;
    while guard.valid_until() < tokio::time::Instant::now() + TTL / 2 {
        assert!(
            Instant::now() < renewed_by,
            "no renewal confirmed after the failover"
        );
        assert!(guard.is_held(), "the acknowledged lock was lost in the failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        get(setup.data_node(new_master), "sentinel:acked").as_deref(),
        Some(guard.token())
    );
    // The next acquisition goes to the new master. The sentinels close the
    // clients' connections when they reconfigure a server, so a request may
    // fail once there before the member reconnects: `lock` tries again.
    let next = redlock
        .lock("sentinel:after-failover", TTL)
        .await
        .expect("acquired after the failover");
    assert_eq!(
        get(setup.data_node(new_master), "sentinel:after-failover").as_deref(),
        Some(next.token())
    );
    next.release().await.expect("released");
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replica_acknowledgement_the_holder_hears_of_the_loss_when_the_promoted_replica_lacks_the_key()
 {
    let mut setup = tokio::task::spawn_blocking(|| SentinelSetup::start(2, 3))
        .await
        .expect("sentinel set");
    let redlock = client(&setup, None);
    let master = setup.master_index();
    // The replicas stopped and cut off (what the master had sent them is
    // already in their sockets): the master acknowledges the lock alone,
    // and dies before any replica can read it.
    let paused: Vec<_> = (0..3).filter(|&i| i != master).map(|i| setup.pause(i)).collect();
    let cut = setup
        .data_node(master)
        .command(&["CLIENT", "KILL", "TYPE", "replica"]);
    assert!(
        cut.expect("CLIENT KILL").starts_with(':'),
        "the replicas' links cut"
    );
    let guard = redlock
        .try_lock("sentinel:unacked", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    let new_master = tokio::task::block_in_place(|| fail_over(&mut setup, paused));
    assert_eq!(
        get(setup.data_node(new_master), "sentinel:unacked"),
        None,
        "the promoted replica lacks the key"
    );
    tokio::time::timeout(TTL + Duration::from_secs(2), guard.lost())
        .await
        .expect("the holder was told of the loss");
    assert!(!guard.is_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_sentinel_member_is_woken_by_the_release() {
    let setup = tokio::task::spawn_blocking(|| SentinelSetup::start(0, 1))
        .await
        .expect("sentinel set");
    let holder = client(&setup, None);
    // Polls every 5 s: only the wake-up published on the master brings the
    // waiter in sooner.
    let waiter = client(&setup, None)
        .with_options(quorumlock::LockOptions::new().retry_delay(Duration::from_secs(5)))
        .expect("options");
    let guard = holder
        .try_lock("sentinel:handoff", TTL)
        .await
        .expect("no error")
        .expect("acquired");
    let waiting = tokio::spawn(async move { waiter.lock("sentinel:handoff", TTL).await });
    // Released once the waiter is in the lock's line on the master.
    let master = setup.data_node(setup.master_index());
    let queued = Instant::now();
    while master
        .command(&["ZCARD", "quorumlock:waiters:{sentinel:handoff}"])
        .expect("ZCARD")
        .starts_with(":0")
    {
        assert!(
            queued.elapsed() < Duration::from_secs(5),
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let released = Instant::now();
    guard.release().await.expect("released");
    let handed = waiting.await.expect("waiter").expect("handed the lock");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "the waiter came {:?} after the release: no wake-up reached it",
        released.elapsed()
    );
    handed.release().await.expect("released");
}
