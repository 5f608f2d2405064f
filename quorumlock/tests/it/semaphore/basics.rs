//! A semaphore's names, its validation, and its permits as locks.

use std::collections::HashSet;
use std::time::Duration;

use quorumlock::{Error, MAX_PERMITS, Setting};
use quorumlock_testkit::{RedisServer, client, get};

const TTL: Duration = Duration::from_secs(10);

#[test]
fn bad_names_and_counts_are_config_errors() {
    let redlock = quorumlock::Redlock::builder()
        .node("redis://127.0.0.1:1")
        .build()
        .unwrap();
    for (name, permits) in [
        ("pool", 0),
        ("pool", MAX_PERMITS + 1),
        ("", 3),
        ("{pool}", 3),
        ("quorumlock:x", 3),
    ] {
        let error = redlock.semaphore(name, permits).unwrap_err();
        assert!(
            matches!(error, Error::Config(ref e) if e.setting() == Setting::Semaphore),
            "{name:?} x {permits}: {error}"
        );
    }
    let pool = redlock.semaphore("pool", MAX_PERMITS).unwrap();
    assert_eq!(pool.permits(), MAX_PERMITS);
    assert_eq!(pool.permit_name(0), "{pool}:permit:0");
}

#[tokio::test]
async fn at_most_k_permits_are_handed_out_each_a_distinct_lock() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let (a, b) = (client(&servers), client(&servers));
    let pool = a.semaphore("pool", 3).unwrap();
    let other = b.semaphore("pool", 3).unwrap();
    let mut held = Vec::new();
    for semaphore in [&pool, &other, &pool] {
        held.push(semaphore.try_acquire(TTL).await.unwrap().expect("a free permit"));
    }
    let indices: HashSet<usize> = held.iter().map(|p| p.index()).collect();
    assert_eq!(indices, HashSet::from([0, 1, 2]));
    for permit in &held {
        // The permit is the lock of its key, with the permit's token on a
        // majority (the attempt returns at quorum; the last node's reply may
        // still be on its way).
        let key = pool.permit_name(permit.index());
        let holding = servers
            .iter()
            .filter(|s| get(s, key).as_deref() == Some(permit.token()));
        assert!(holding.count() >= 2, "{key}");
        assert!(permit.is_held() && permit.fence_token().is_none());
    }
    assert!(other.try_acquire(TTL).await.unwrap().is_none(), "a fourth holder");
    // A plain lock on a permit's key is refused too: it is the same lock.
    assert!(b.try_lock(pool.permit_name(1), TTL).await.unwrap().is_none());

    let freed = held.remove(1);
    let index = freed.index();
    freed.release().await.unwrap();
    let again = other
        .try_acquire(TTL)
        .await
        .unwrap()
        .expect("the released permit");
    assert_eq!(again.index(), index);
    assert!(pool.try_acquire(TTL).await.unwrap().is_none());
}

#[tokio::test]
async fn fenced_permits_carry_tokens_that_grow_per_permit() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = client(&servers);
    let fenced = redlock.with_options(redlock.options().fenced(true)).unwrap();
    let pool = fenced.semaphore("fenced-pool", 1).unwrap();
    let first = pool.acquire(TTL).await.unwrap();
    let t1 = first.fence_token().expect("a fence token");
    first.release().await.unwrap();
    let second = pool.acquire(TTL).await.unwrap();
    assert!(second.fence_token().expect("a fence token") > t1);
}

#[tokio::test]
async fn acquire_gives_up_with_held_after_the_wait() {
    let servers = vec![RedisServer::start()];
    let redlock = client(&servers);
    let pool = redlock.semaphore("full", 2).unwrap();
    let _held = [pool.acquire(TTL).await.unwrap(), pool.acquire(TTL).await.unwrap()];
    let short = redlock
        .with_options(
            redlock
                .options()
                .wait(Duration::from_millis(300))
                .retry_delay(Duration::from_millis(50)),
        )
        .unwrap();
    let started = tokio::time::Instant::now();
    let error = short
        .semaphore("full", 2)
        .unwrap()
        .acquire(TTL)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Held { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The waiter left the queues it had joined.
    quorumlock_testkit::eventually("the waiter left the queues", Duration::from_secs(5), || {
        super::queued(&servers[0], "full") == 0
    })
    .await;
}
