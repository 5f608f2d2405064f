//! Replica-acknowledged mode (`WAIT`) against a real master and replica: a
//! lock counts only once the replica has it, so it survives a failover that
//! a plain lock can lose; a replica that stops answering fails acquisitions,
//! extends and renewals, and leaves no key behind.

use std::slice;
use std::time::Duration;

use quorumlock::{Error, NodeError, NodeErrorKind, Redlock, ReplicaAck, Setting};
use quorumlock_testkit::{RedisServer, calls, client, dbsize, get, int, pttl, start_nodes, urls};
use tokio::time::Instant;

/// Per-node timeout of these tests: generous for a loaded CI machine, and
/// well above [`ACK_TIMEOUT`] so that a short `WAIT` can be told from a
/// timed-out node.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long a node waits for its replica. A healthy local replica answers
/// in about a millisecond; this leaves room for a busy machine.
const ACK_TIMEOUT: Duration = Duration::from_millis(300);

const TTL: Duration = Duration::from_secs(10);

/// A client in replica-acknowledged mode over `nodes` (1 replica each).
fn acked(nodes: &[RedisServer]) -> Redlock {
    Redlock::builder()
        .nodes(urls(nodes))
        .node_timeout(NODE_TIMEOUT)
        .replica_ack(ReplicaAck::new(1).with_timeout(ACK_TIMEOUT))
        .build()
        .expect("valid replica-ack config")
}

/// Makes `replica` a master (what Sentinel does on failover).
fn promote(replica: &RedisServer) {
    let reply = replica.command(&["REPLICAOF", "NO", "ONE"]).expect("REPLICAOF");
    assert!(reply.starts_with("+OK"), "REPLICAOF NO ONE: {reply:?}");
}

/// The single node error of an `Unreachable` error, panicking on anything else.
fn only_node_error(result: Result<impl std::fmt::Debug, Error>) -> NodeError {
    match result {
        Err(Error::Unreachable {
            succeeded: 0,
            mut errors,
            ..
        }) if errors.len() == 1 => errors.pop().unwrap(),
        other => panic!("expected Unreachable with one node error, got {other:?}"),
    }
}

fn assert_replica_missing(error: &NodeError) {
    assert!(
        matches!(
            error.kind,
            NodeErrorKind::ReplicasMissing {
                acked: 0,
                required: 1,
                timeout: ACK_TIMEOUT,
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("only 0 of 1 required replicas acknowledged"),
        "{message}"
    );
}

#[tokio::test]
async fn wait_mode_acquires_and_the_key_is_on_the_replica() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let redlock = acked(slice::from_ref(&master));
    let waits = calls(&master, "wait");
    let guard = redlock
        .try_lock("invoice:7", TTL)
        .await
        .unwrap()
        .expect("free resource");
    // WAIT answered only after the replica applied the SET: no polling.
    assert_eq!(get(&replica, "invoice:7").as_deref(), Some(guard.token()));
    let multi = redlock
        .try_lock(["stock:sku-1", "order:1"], TTL)
        .await
        .unwrap()
        .expect("free resources");
    for key in ["stock:sku-1", "order:1"] {
        assert_eq!(get(&replica, key).as_deref(), Some(multi.token()));
    }
    assert_eq!(
        calls(&master, "wait"),
        waits + 2,
        "each acquisition sent one WAIT"
    );
    guard.release().await.unwrap();
    multi.release().await.unwrap();
    assert_eq!(dbsize(&master), 0, "one node: the release waited for it");
}

#[tokio::test]
async fn frozen_replica_fails_acquisition_after_the_wait_timeout_and_leaves_no_key() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let redlock = acked(slice::from_ref(&master));
    let paused = replica.pause();
    let started = Instant::now();
    let error = only_node_error(redlock.try_lock("invoice:8", TTL).await);
    let elapsed = started.elapsed();
    assert_replica_missing(&error);
    assert!(
        elapsed >= ACK_TIMEOUT && elapsed < NODE_TIMEOUT,
        "failed by the WAIT timeout, not the node timeout: {elapsed:?}"
    );
    assert_eq!(dbsize(&master), 0, "the unacknowledged grant was taken back");
    // Once the replica answers again, the same client acquires.
    paused.resume();
    let guard = redlock
        .try_lock("invoice:8", TTL)
        .await
        .unwrap()
        .expect("free resource");
    assert_eq!(get(&replica, "invoice:8").as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn node_with_a_frozen_replica_keeps_no_key_when_the_others_reach_quorum() {
    let masters = start_nodes(3);
    let replicas: Vec<RedisServer> = masters.iter().map(RedisServer::start_replica_of).collect();
    let redlock = acked(&masters);
    let _paused = replicas[2].pause();
    let guard = redlock
        .try_lock("doc:1001", TTL)
        .await
        .unwrap()
        .expect("2 of 3 nodes acknowledged");
    for i in [0, 1] {
        assert_eq!(get(&replicas[i], "doc:1001").as_deref(), Some(guard.token()));
    }
    // The third node's WAIT runs out after the attempt returned; its grant
    // is then deleted in the background, well within the node timeout.
    let deadline = Instant::now() + NODE_TIMEOUT * 2;
    while get(&masters[2], "doc:1001").is_some() {
        assert!(
            Instant::now() < deadline,
            "the unacknowledged grant stayed on the node"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn wait_mode_lock_survives_failover_to_the_replica() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let first = acked(slice::from_ref(&master));
    let guard = first
        .try_lock("stock:sku-42", TTL)
        .await
        .unwrap()
        .expect("free resource");
    master.kill();
    promote(&replica);
    let second = client(slice::from_ref(&replica));
    assert!(
        second.try_lock("stock:sku-42", TTL).await.unwrap().is_none(),
        "the promoted replica still holds the first lock"
    );
    assert_eq!(get(&replica, "stock:sku-42").as_deref(), Some(guard.token()));
}

#[tokio::test]
async fn without_wait_a_lock_the_replica_missed_is_lost_on_failover() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    // Cut replication: freeze the replica and have the master drop its link.
    // Freezing alone is not enough: the kernel still accepts the master's
    // stream into the frozen replica's socket, which applies it on SIGCONT.
    let paused = replica.pause();
    assert_eq!(int(&master, &["CLIENT", "KILL", "TYPE", "replica"]), 1);
    let first = client(slice::from_ref(&master));
    let guard = first
        .try_lock("stock:sku-42", TTL)
        .await
        .unwrap()
        .expect("the master alone grants it");
    // In WAIT mode the same master refuses to count such a grant.
    assert_replica_missing(&only_node_error(
        acked(slice::from_ref(&master))
            .try_lock("stock:sku-43", TTL)
            .await,
    ));
    master.kill();
    paused.resume();
    promote(&replica);
    let second = client(slice::from_ref(&replica));
    let stolen = second
        .try_lock("stock:sku-42", TTL)
        .await
        .unwrap()
        .expect("the promoted replica never saw the first lock");
    assert!(
        guard.is_held(),
        "two holders: the first still believes it holds the lock"
    );
    assert_ne!(stolen.token(), guard.token());
}

#[tokio::test]
async fn renewal_in_wait_mode_keeps_the_lock_past_its_ttl_with_a_healthy_replica() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let redlock = acked(slice::from_ref(&master));
    let ttl = Duration::from_millis(1500);
    let mut guard = redlock
        .try_lock("pdf:500", ttl)
        .await
        .unwrap()
        .expect("free resource");
    let first_valid_until = guard.valid_until();
    let waits = calls(&master, "wait");
    while Instant::now() < first_valid_until + ttl / 2 {
        assert!(guard.is_held(), "lost while the replica was healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        guard.valid_until() > first_valid_until,
        "renewals moved the validity"
    );
    assert!(calls(&master, "wait") >= waits + 2, "each renewal sent WAIT");
    guard.extend(ttl).await.expect("extend with a healthy replica");
    assert_eq!(get(&replica, "pdf:500").as_deref(), Some(guard.token()));
    assert!(pttl(&replica, "pdf:500") > 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn renewal_and_extend_in_wait_mode_do_not_confirm_while_the_replica_is_frozen() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let redlock = acked(slice::from_ref(&master));
    let ttl = Duration::from_millis(1500);
    let mut guard = redlock
        .try_lock("pdf:501", ttl)
        .await
        .unwrap()
        .expect("free resource");
    let _paused = replica.pause();
    assert_replica_missing(&only_node_error(guard.extend(ttl).await));
    let valid_until = guard.valid_until();
    tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the loss is signalled");
    assert!(
        Instant::now() >= valid_until,
        "no renewal confirmed: the lock ran out at its last acknowledged validity"
    );
    assert_eq!(guard.valid_until(), valid_until);
    assert!(!guard.is_held());
}

#[test]
fn replica_ack_timeout_not_below_the_node_timeout_is_a_config_error() {
    let build = |node_timeout: Duration, ack: ReplicaAck| {
        Redlock::builder()
            .node("redis://127.0.0.1:1")
            .node_timeout(node_timeout)
            .replica_ack(ack)
            .build()
    };
    let ms = Duration::from_millis;
    for wait in [ms(100), ms(250)] {
        match build(ms(100), ReplicaAck::new(1).with_timeout(wait)) {
            Err(Error::Config(error)) => {
                assert_eq!(error.setting(), Setting::ReplicaAck, "{error}");
                assert!(error.message().contains("node timeout"), "{error}");
            }
            other => panic!("expected a Config error for WAIT {wait:?}, got {other:?}"),
        }
    }
    for ack in [
        ReplicaAck::new(0),
        ReplicaAck::new(1).with_timeout(Duration::ZERO),
    ] {
        assert!(matches!(build(ms(100), ack), Err(Error::Config(_))), "{ack:?}");
    }
    assert!(build(ms(100), ReplicaAck::new(2).with_timeout(ms(99))).is_ok());
    assert!(
        Redlock::builder()
            .node("redis://127.0.0.1:1")
            .replica_ack(ReplicaAck::new(1))
            .build()
            .is_ok(),
        "the defaults fit together"
    );
}
