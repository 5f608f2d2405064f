//! The Redis Cluster harness against real `redis-server` nodes: clusters
//! of one and two primaries (formed by hand) and of three primaries with a
//! replica each serve SET and GET through `redis-cli -c`; a cluster
//! promotes a replica when a primary is killed and takes the old one back,
//! and moves a slot with its keys to another primary.

use std::time::{Duration, Instant};

use quorumlock_testkit::redis_cluster::RedisCluster;

/// How long a test waits for what the cluster does in the background
/// (replication, a failover on a paused primary): a few node timeouts,
/// with room for a loaded CI machine.
const BACKGROUND_LIMIT: Duration = Duration::from_secs(15);

/// Polls `condition` every 20 ms until it holds; panics naming `what` once
/// the background limit has passed.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < BACKGROUND_LIMIT,
            "timed out after {BACKGROUND_LIMIT:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `key` as the replica on `port` has it (`READONLY`, then `GET`).
fn replica_get(port: u16, key: &str) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
    redis::cmd("READONLY").query::<()>(&mut conn).ok()?;
    redis::cmd("GET").arg(key).query(&mut conn).ok()?
}

/// SETs `key` through the cluster, panicking unless it says OK.
fn set(cluster: &RedisCluster, key: &str, value: &str) {
    let reply = cluster.cli(&["SET", key, value]).expect("SET");
    assert_eq!(reply.trim(), "OK", "SET {key}");
}

/// GETs `key` through the cluster.
fn get(cluster: &RedisCluster, key: &str) -> String {
    cluster.cli(&["GET", key]).expect("GET").trim().to_owned()
}

#[test]
fn three_primaries_serve_set_and_get() {
    let cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.len(), 6);
    let ports = cluster.ports();
    let seeds: Vec<String> = ports[..3].iter().map(|p| format!("127.0.0.1:{p}")).collect();
    assert_eq!(cluster.url(), format!("redis+cluster://{}", seeds.join(",")));
    let seed_urls: Vec<String> = seeds.iter().map(|s| format!("redis://{s}")).collect();
    assert_eq!(cluster.seed_urls(), seed_urls);
    assert_eq!(cluster.current_primaries(), [0, 1, 2]);
    assert_eq!(cluster.primary_for_slot(0), 0);
    assert_eq!(cluster.primary_for_slot(16383), 2);

    // Keys on every primary: redis-cli follows the MOVED redirections.
    let keys = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    for key in keys {
        set(&cluster, key, &format!("value of {key}"));
    }
    for key in keys {
        assert_eq!(get(&cluster, key), format!("value of {key}"));
    }
    let owners: std::collections::BTreeSet<usize> = keys
        .iter()
        .map(|k| cluster.primary_for_slot(cluster.slot_of(k)))
        .collect();
    assert_eq!(owners.len(), 3, "the keys are spread over all primaries");
}

#[test]
fn one_and_two_primaries_are_formed_without_redis_cli_create() {
    for primaries in [1, 2] {
        let cluster = RedisCluster::start(primaries, 0);
        assert_eq!(cluster.len(), primaries);
        assert_eq!(cluster.current_primaries(), (0..primaries).collect::<Vec<_>>());
        assert_eq!(cluster.primary_for_slot(0), 0);
        assert_eq!(cluster.primary_for_slot(16383), primaries - 1);
        set(&cluster, "alpha", "one");
        assert_eq!(get(&cluster, "alpha"), "one");
        let pid = cluster.pid(0).expect("node 0 runs");
        assert!(pid > 0);
        let info = cluster.command(0, &["INFO", "stats"]).expect("INFO");
        assert!(info.contains("total_commands_processed:"), "{info}");
    }
}

#[test]
fn one_primary_with_a_replica_is_formed_by_hand() {
    let cluster = RedisCluster::start(1, 1);
    assert_eq!(cluster.current_primaries(), [0]);
    set(&cluster, "bravo", "two");
    let replica = cluster.ports()[1];
    wait_until("the replica has the key", || {
        replica_get(replica, "bravo").as_deref() == Some("two")
    });
}

#[test]
fn failover_promotes_a_replica_and_the_slot_is_served_again() {
    let mut cluster = RedisCluster::start(3, 1);
    let slot = cluster.slot_of("lock:failover");
    let old = cluster.primary_for_slot(slot);
    set(&cluster, "lock:failover", "held");
    // Replicated before the primary dies (replication is asynchronous).
    let replica_port = cluster.ports()[cluster.len() - 3 + old];
    wait_until("the replica has the key", || {
        replica_get(replica_port, "lock:failover").as_deref() == Some("held")
    });

    let new = cluster.failover_primary_of(slot);
    assert_ne!(new, old);
    assert!(!cluster.is_running(old));
    assert_eq!(cluster.primary_for_slot(slot), new);
    assert_eq!(get(&cluster, "lock:failover"), "held");
    set(&cluster, "lock:failover", "again");
    assert_eq!(get(&cluster, "lock:failover"), "again");

    // The old primary comes back as a replica of the new one.
    cluster.restart(old);
    assert!(cluster.is_running(old));
    assert_eq!(cluster.primary_for_slot(slot), new);
    assert!(!cluster.current_primaries().contains(&old));
    assert!(cluster.log(old).contains("Ready to accept connections"));
}

#[test]
fn slot_migration_moves_the_key() {
    let cluster = RedisCluster::start(3, 1);
    let key = "lock:migrating";
    let slot = cluster.slot_of(key);
    set(&cluster, key, "moving");
    let from = cluster.primary_for_slot(slot);
    let to = (from + 1) % 3;

    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.primary_for_slot(slot), to);
    assert_eq!(get(&cluster, key), "moving");
    // The key lives on the new primary, and the old one redirects.
    let on_target = cluster.cli(&["-p", &cluster.ports()[to].to_string(), "GET", key]);
    assert_eq!(on_target.expect("GET").trim(), "moving");
    set(&cluster, key, "moved");
    assert_eq!(get(&cluster, key), "moved");
    cluster.wait_healthy();
}

#[test]
fn slot_migration_moves_many_keys_in_batches() {
    let cluster = RedisCluster::start(3, 1);
    // One hash tag: every key in one slot, more than one MIGRATE batch.
    let slot = cluster.slot_of("{batch}");
    let from = cluster.primary_for_slot(slot);
    let ports = cluster.ports();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", ports[from])).expect("url");
    let mut conn = client.get_connection().expect("connect to the slot's primary");
    let mut pipe = redis::pipe();
    for n in 0..KEYS_IN_SLOT {
        pipe.set(format!("{{batch}}:{n}"), n).ignore();
    }
    pipe.query::<()>(&mut conn).expect("SET the keys");
    let to = (from + 2) % 3;

    cluster.migrate_slot(slot, to);
    let count = |port: u16| -> String {
        let slot = slot.to_string();
        let reply = cluster.cli(&["-p", &port.to_string(), "CLUSTER", "COUNTKEYSINSLOT", &slot]);
        reply.expect("COUNTKEYSINSLOT").trim().to_owned()
    };
    assert_eq!(count(ports[to]), KEYS_IN_SLOT.to_string());
    assert_eq!(count(ports[from]), "0");
    assert_eq!(get(&cluster, "{batch}:123"), "123");
    // Moving it back is the same operation the other way.
    cluster.migrate_slot(slot, from);
    assert_eq!(count(ports[from]), KEYS_IN_SLOT.to_string());
    cluster.wait_healthy();
}

/// More keys than one `MIGRATE` batch of the harness moves.
const KEYS_IN_SLOT: usize = 250;

#[test]
fn without_replicas_a_killed_primary_comes_back_empty() {
    let mut cluster = RedisCluster::start(3, 0);
    assert_eq!(cluster.len(), 3);
    let slot = cluster.slot_of("lock:gone");
    set(&cluster, "lock:gone", "held");
    let owner = cluster.primary_for_slot(slot);
    cluster.kill(owner);
    assert!(!cluster.is_running(owner));
    // Its port refuses connections while it is dead.
    let port = cluster.ports()[owner];
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());

    cluster.restart(owner);
    assert_eq!(cluster.primary_for_slot(slot), owner);
    assert_eq!(get(&cluster, "lock:gone"), "", "no persistence: the key is gone");
}

#[test]
fn a_paused_primary_is_taken_over_and_rejoins_as_a_replica() {
    let cluster = RedisCluster::start(3, 1);
    let paused = cluster.pause(0);
    // The paused node does not answer; the others promote its replica.
    wait_until("a replica takes over slot 0", || cluster.primary_for_slot(0) != 0);
    let new = cluster.primary_for_slot(0);
    assert_eq!(new, 3, "node 0's replica");
    paused.resume();
    cluster.wait_healthy();
    assert_eq!(cluster.current_primaries(), [1, 2, 3]);
    assert!((0..cluster.len()).all(|i| cluster.is_running(i)));
}
