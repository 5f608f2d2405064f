//! A node whose clock runs fast forgets a lock early (Redis expires keys by
//! its own wall clock). A client that has read that node's clock (its
//! renewal rounds carry a `TIME`) trusts a lock the node granted only for as
//! long as the node keeps it, and does not count a node too fast to keep a
//! key usefully long. Real redis-server processes, one of them with the
//! test kit's clock-skew shim.

use std::time::Duration;

use quorumlock::{Error, Guard, LockOptions, NodeErrorKind, Redlock};
use quorumlock_testkit::{
    Persistence, RedisServer, SkewedClock, builder, calls, eventually, get, set_foreign, start_nodes,
};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(600);
const NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// Tries of the bare-majority scenario, each with its own outcome.
const TRIES: usize = 50;

/// Three nodes, the first with a clock running at `rate`.
fn nodes(clock: &SkewedClock) -> Vec<RedisServer> {
    vec![
        RedisServer::start_skewed(clock, Persistence::None, &[]),
        RedisServer::start(),
        RedisServer::start(),
    ]
}

fn client(nodes: &[RedisServer], options: LockOptions) -> Redlock {
    builder(nodes)
        .node_timeout(NODE_TIMEOUT)
        .options(options)
        .build()
        .unwrap()
}

/// A lock the holder keeps renewed for the whole test on a resource of its
/// own: its renewal rounds read every node's clock, as a client in use does.
async fn keep_reading_clocks(holder: &Redlock) -> Guard {
    holder
        .with_options(LockOptions::new())
        .unwrap()
        .lock("clock:readings", Duration::from_millis(300))
        .await
        .unwrap()
}

/// The lock on `resource` over exactly {fast node, node 1}: node 2 refuses
/// it (another owner's key, deleted again right after).
async fn bare_majority(holder: &Redlock, nodes: &[RedisServer], resource: &str) -> Guard {
    set_foreign(&nodes[2], resource, "other", 10_000);
    let guard = holder
        .try_lock(resource, TTL)
        .await
        .unwrap()
        .expect("the fast node and node 1");
    nodes[2].command(&["DEL", resource]).unwrap();
    guard
}

#[tokio::test]
async fn a_bare_majority_with_a_fast_node_is_trusted_only_while_that_node_keeps_the_key() {
    let clock = SkewedClock::new(1.5, 0);
    let nodes = nodes(&clock);
    // The holder renews nothing on the tested resource: its validity alone
    // must end before the fast node forgets the key.
    let holder = client(&nodes, LockOptions::new().auto_renew(false).max_attempts(1));
    let contender = client(&nodes, LockOptions::new().max_attempts(1));
    let readings = keep_reading_clocks(&holder).await;
    let resource = "clock:fast";
    // Until the holder has measured the fast clock, its bare-majority locks
    // last the full ttl: wait for it, through what the holder believes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let guard = bare_majority(&holder, &nodes, resource).await;
        let believed = guard.valid_until() - Instant::now();
        guard.release().await.unwrap();
        if believed < TTL.mul_f64(0.7) {
            break;
        }
        assert!(Instant::now() < deadline, "the holder never saw the fast clock");
    }
    // Each try's overlap, if any: how long the contender was in while the
    // holder still believed in its lock.
    let mut overlaps = Vec::new();
    let mut closest = Duration::MAX;
    for i in 0..TRIES {
        let guard = bare_majority(&holder, &nodes, resource).await;
        // The contender gets in once the fast node forgot the holder's key.
        let giving_up = Instant::now() + TTL + Duration::from_millis(500);
        let taken = loop {
            if let Some(second) = contender.try_lock(resource, TTL).await.unwrap() {
                break (Instant::now(), second);
            }
            assert!(
                Instant::now() < giving_up,
                "try {i}: the contender never got the lock"
            );
        };
        let (entered, second) = taken;
        if entered < guard.valid_until() {
            overlaps.push((i, guard.valid_until() - entered));
        } else {
            closest = closest.min(entered - guard.valid_until());
        }
        second.release().await.unwrap();
        // Lapsed: the release reports it, and still deletes what is left.
        let _ = guard.release().await;
        eventually(
            "the nodes no longer hold the resource",
            Duration::from_secs(2),
            || nodes.iter().all(|node| get(node, resource).is_none()),
        )
        .await;
    }
    readings.release().await.unwrap();
    println!(
        "{TRIES} tries, {} overlaps; closest entry after a validity's end: {closest:?}",
        overlaps.len()
    );
    assert!(
        overlaps.is_empty(),
        "{} of {TRIES} tries: the contender entered before the holder's validity ended, by (try, time): {overlaps:?}",
        overlaps.len()
    );
}

#[tokio::test]
async fn a_node_too_fast_to_keep_a_key_does_not_count_and_says_so() {
    let clock = SkewedClock::new(10.0, 0);
    let nodes = nodes(&clock);
    let redlock = client(&nodes, LockOptions::new().max_attempts(1));
    let readings = keep_reading_clocks(&redlock).await;
    let resource = "clock:too-fast";
    set_foreign(&nodes[2], resource, "other", 60_000);
    // At ten times our speed a 600 ms key lasts 60 ms, less than a node
    // timeout: once measured, the node's grant is its error, and with node
    // 2 taken no majority is left.
    let deadline = Instant::now() + Duration::from_secs(10);
    let errors = loop {
        match redlock.lock(resource, TTL).await {
            Ok(guard) => {
                guard.release().await.unwrap();
            }
            Err(Error::Held { errors, .. }) => break errors,
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "the fast node's grants kept counting");
    };
    let rates: Vec<f64> = errors
        .iter()
        .filter_map(|e| match e.kind {
            NodeErrorKind::ClockTooFast { rate } => Some(rate),
            _ => None,
        })
        .collect();
    assert!(
        matches!(rates[..], [rate] if (10.0..10.1).contains(&rate)),
        "{errors:?}"
    );
    assert!(errors[0].to_string().contains("times as fast"), "{}", errors[0]);
    readings.release().await.unwrap();
}

/// How often a client that takes locks reads each node's clock
/// (`RATE_READ_EVERY` in the library's config).
const READ_EVERY: Duration = Duration::from_millis(200);

#[tokio::test]
async fn plain_acquisitions_send_no_clock_reading_of_their_own() {
    let nodes = start_nodes(3);
    let redlock = client(&nodes, LockOptions::new().auto_renew(false));
    let before: Vec<u64> = nodes.iter().map(|node| calls(node, "time")).collect();
    let sets_before: Vec<u64> = nodes.iter().map(|node| calls(node, "set")).collect();
    let started = Instant::now();
    let cycles = 300;
    for i in 0..cycles {
        let guard = redlock
            .try_lock(format!("clock:plain:{i}").as_str(), TTL)
            .await
            .unwrap()
            .expect("free");
        guard.release().await.unwrap();
    }
    let elapsed = started.elapsed();
    // The readings run in the background: the first one is due at the first
    // acquisition, the next ones at most every READ_EVERY after.
    let most = 1 + (elapsed.as_millis() / READ_EVERY.as_millis()) as u64;
    eventually(
        "the first clock readings are done",
        Duration::from_secs(2),
        || {
            nodes
                .iter()
                .zip(&before)
                .all(|(node, before)| calls(node, "time") > *before)
        },
    )
    .await;
    // An acquisition returns once a majority granted it: the last SET to a
    // slower node may still be on its way when the loop ends.
    eventually(
        "every acquisition's SET reached every node",
        Duration::from_secs(2),
        || {
            nodes
                .iter()
                .zip(&sets_before)
                .all(|(node, before)| calls(node, "set") - before >= cycles)
        },
    )
    .await;
    for ((node, before), sets_before) in nodes.iter().zip(&before).zip(&sets_before) {
        let (times, sets) = (calls(node, "time") - before, calls(node, "set") - sets_before);
        assert_eq!(sets, cycles, "one SET per acquisition");
        assert!(
            times <= most,
            "{times} TIME calls in {elapsed:?} for {cycles} acquisitions: at most {most}"
        );
    }
}
