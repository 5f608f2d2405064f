//! `LockOptions::min_hold`: a lock given back before its minimum hold has
//! passed (released, dropped, or by a shutdown) keeps its keys until then;
//! one given back later is deleted.

use std::time::Duration;

use quorumlock::{Error, Guard, LockOptions, MAX_TTL, Redlock};
use quorumlock_testkit::{RedisServer, all_empty, client, eventually, get, pttl, start_nodes};
use tokio::time::{Instant, sleep_until};

const KEY: &str = "report:hourly";

/// The transit and scheduling time allowed between a key's expected and
/// measured expiry; small next to the ttls the tests tell it from.
const SLACK: Duration = Duration::from_millis(100);

fn with_min_hold(servers: &[RedisServer], hold: Duration) -> Redlock {
    let redlock = client(servers);
    redlock
        .with_options(redlock.options().min_hold(hold))
        .expect("valid options")
}

/// Every node holds `token` under [`KEY`] with a PTTL that ends at
/// `kept_until`, not at the lock's ttl: give or take [`SLACK`], since the
/// PEXPIRE counts from its arrival on the node and PTTL from its own.
fn expires_at_on_every_node(servers: &[RedisServer], token: &str, kept_until: Instant) -> bool {
    expires_between_on_every_node(servers, token, kept_until, kept_until)
}

/// As [`expires_at_on_every_node`], for an expiry known to lie between
/// `earliest` and `latest`.
fn expires_between_on_every_node(
    servers: &[RedisServer],
    token: &str,
    earliest: Instant,
    latest: Instant,
) -> bool {
    servers.iter().all(|server| {
        let before = Instant::now();
        let left = pttl(server, KEY);
        let after = Instant::now();
        let slack = SLACK.as_millis() as i64;
        let most = latest.saturating_duration_since(before).as_millis() as i64 + slack;
        let least = earliest.saturating_duration_since(after).as_millis() as i64 - slack;
        get(server, KEY).as_deref() == Some(token) && left <= most && left >= least
    })
}

/// Takes [`KEY`] (free) for 20 s; returns the guard and instants before
/// and after the call, between which the acquisition started.
async fn take(redlock: &Redlock) -> (Guard, Instant, Instant) {
    let before = Instant::now();
    let guard = redlock
        .try_lock(KEY, Duration::from_secs(20))
        .await
        .expect("healthy nodes")
        .expect("free resource");
    (guard, before, Instant::now())
}

/// Nobody else can take a lock whose keys are kept until `kept_until`, and
/// anyone can once it passed: its keys are gone by then.
async fn kept_then_free(servers: &[RedisServer], kept_until: Instant) {
    let other = client(servers);
    assert!(
        other
            .try_lock(KEY, Duration::from_secs(5))
            .await
            .expect("healthy")
            .is_none(),
        "nobody else can take a kept lock"
    );
    sleep_until(kept_until).await;
    all_empty(servers, Duration::from_secs(2)).await;
    let next = other
        .try_lock(KEY, Duration::from_secs(5))
        .await
        .expect("healthy")
        .expect("free once the min hold passed");
    next.release().await.expect("release");
}

#[tokio::test]
async fn a_release_before_the_min_hold_keeps_the_keys_until_it_passes() {
    let servers = start_nodes(3);
    let hold = Duration::from_secs(3);
    let redlock = with_min_hold(&servers, hold);
    let (guard, before, after) = take(&redlock).await;
    let token = guard.token().to_owned();

    let report = guard.release().await.expect("release");
    let kept_until = report.kept_until.expect("released before the min hold: kept");
    assert!(
        kept_until >= before + hold && kept_until <= after + hold,
        "kept until the acquisition's start plus the min hold"
    );
    assert_eq!(report.deleted, 0, "{report:?}");
    assert!(report.kept >= redlock.quorum(), "{report:?}");

    // The nodes still to answer get their PEXPIRE in the background; then
    // every node's key ends at the min hold, far short of the 20 s ttl.
    eventually(
        "every node's key expires at the end of the min hold",
        Duration::from_secs(2),
        || expires_at_on_every_node(&servers, &token, kept_until),
    )
    .await;
    kept_then_free(&servers, kept_until).await;
}

#[tokio::test]
async fn a_kept_lock_is_no_longer_renewed() {
    let servers = start_nodes(3);
    // The min hold outlasts the ttl: renewal would have to keep the keys,
    // and must not reset them to the ttl after the keep.
    let hold = Duration::from_secs(3);
    let redlock = with_min_hold(&servers, hold);
    let guard = redlock
        .try_lock(KEY, Duration::from_secs(1))
        .await
        .expect("healthy nodes")
        .expect("free resource");
    let token = guard.token().to_owned();
    let report = guard.release().await.expect("release");
    let kept_until = report.kept_until.expect("kept");
    // Past two renewal periods (ttl / 3) and the ttl itself.
    sleep_until(Instant::now() + Duration::from_millis(1_200)).await;
    assert!(
        expires_at_on_every_node(&servers, &token, kept_until),
        "the keys still end at the min hold: {:?}",
        servers.iter().map(|s| pttl(s, KEY)).collect::<Vec<_>>()
    );
    sleep_until(kept_until).await;
    all_empty(&servers, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_release_after_the_min_hold_deletes_the_keys() {
    let servers = start_nodes(3);
    let hold = Duration::from_millis(300);
    let redlock = with_min_hold(&servers, hold);
    let guard = redlock
        .try_lock(KEY, Duration::from_secs(20))
        .await
        .expect("healthy nodes")
        .expect("free resource");
    // The min hold counts from the acquisition's start, which lies
    // somewhere inside `try_lock`: only its return is surely after it.
    let acquired = Instant::now();
    sleep_until(acquired + hold).await;
    let report = guard.release().await.expect("release");
    assert_eq!(report.kept_until, None, "{report:?}");
    assert_eq!(report.kept, 0, "{report:?}");
    assert_eq!(report.deleted, report.confirmed, "{report:?}");
    // Long before the 20 s ttl.
    all_empty(&servers, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn with_lock_and_a_dropped_guard_keep_the_keys_too() {
    let servers = start_nodes(3);
    let hold = Duration::from_secs(3);
    let redlock = with_min_hold(&servers, hold);

    let start = Instant::now();
    let token = redlock
        .with_lock(KEY, Duration::from_secs(20), async |guard| {
            guard.token().to_owned()
        })
        .await
        .expect("with_lock");
    let done = Instant::now();
    eventually(
        "with_lock's release kept the keys until the min hold",
        Duration::from_secs(2),
        || expires_between_on_every_node(&servers, &token, start + hold, done + hold),
    )
    .await;
    sleep_until(done + hold).await;
    all_empty(&servers, Duration::from_secs(2)).await;

    let start = Instant::now();
    let guard = redlock
        .try_lock(KEY, Duration::from_secs(20))
        .await
        .expect("healthy nodes")
        .expect("free resource");
    let taken = Instant::now();
    let token = guard.token().to_owned();
    drop(guard);
    eventually(
        "the dropped guard's release kept the keys until the min hold",
        Duration::from_secs(2),
        || expires_between_on_every_node(&servers, &token, start + hold, taken + hold),
    )
    .await;
    sleep_until(taken + hold).await;
    all_empty(&servers, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_shutdown_inside_the_min_hold_keeps_the_keys_until_it_passes() {
    let servers = start_nodes(3);
    let hold = Duration::from_secs(3);
    let redlock = with_min_hold(&servers, hold);
    let (guard, before, after) = take(&redlock).await;
    let token = guard.token().to_owned();

    let report = redlock.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.released, 1, "{report}");
    assert!(report.is_complete(), "{report}");
    // Kept on every node until the min hold ends, far short of the 20 s
    // ttl, and not deleted: the job cannot run again before then.
    assert!(
        expires_between_on_every_node(&servers, &token, before + hold, after + hold),
        "the keys end at the min hold: {:?}",
        servers.iter().map(|s| pttl(s, KEY)).collect::<Vec<_>>()
    );
    drop(guard);
    kept_then_free(&servers, after + hold).await;
}

#[test]
fn a_min_hold_beyond_the_longest_ttl_is_refused() {
    let redlock = Redlock::builder()
        .node("redis://127.0.0.1:1")
        .build()
        .expect("valid");
    let too_long = redlock.options().min_hold(MAX_TTL + Duration::from_secs(1));
    assert!(matches!(
        redlock.with_options(too_long.clone()),
        Err(Error::Config(_))
    ));
    let built = Redlock::builder()
        .node("redis://127.0.0.1:1")
        .options(too_long)
        .build();
    assert!(matches!(built, Err(Error::Config(_))));
    assert!(redlock.with_options(LockOptions::new().min_hold(MAX_TTL)).is_ok());
}
