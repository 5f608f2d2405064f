//! Every setting, however absurd, is a `Config` error or a working lock,
//! never a panic: builder and option durations from zero to
//! `Duration::MAX`, drift factors including NaN and ttls of any size,
//! against a real redis-server. (The CLI's duration flags have a property
//! test of their own in quorumlock-cli.)

use std::time::Duration;

use proptest::prelude::*;
use quorumlock::{Error, LockOptions, Redlock};
use quorumlock_testkit::{PanicProbe, RedisServer};

/// Durations from the edges inwards: zero, one nanosecond, the largest, and
/// random ones of every magnitude.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::MAX),
        (1u64..2_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_secs),
    ]
}

/// A ttl: mostly ones a lock can work with, and the edges.
fn ttl() -> impl Strategy<Value = Duration> {
    prop_oneof![
        3 => (200u64..5_000).prop_map(Duration::from_millis),
        1 => duration(),
    ]
}

#[derive(Debug, Clone)]
struct Settings {
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    drift_fixed: Duration,
    retry_delay: Duration,
    wait: Duration,
    min_validity: Duration,
    max_hold: Option<Duration>,
    max_renewals: Option<u32>,
    max_attempts: Option<u32>,
    fenced: bool,
    ttl: Duration,
}

fn settings() -> impl Strategy<Value = Settings> {
    let timing = (
        prop_oneof![3 => (1u64..150).prop_map(Duration::from_millis), 1 => duration()],
        prop_oneof![3 => Just(Duration::from_secs(1)), 1 => duration()],
        prop_oneof![
            Just(0.01),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(-0.5),
            Just(1.0),
            0.0f64..1.0
        ],
        prop_oneof![3 => Just(Duration::from_millis(2)), 1 => duration()],
        prop_oneof![3 => (1u64..50).prop_map(Duration::from_millis), 1 => duration()],
        prop_oneof![3 => Just(Duration::ZERO), 1 => duration()],
    );
    let limits = (
        prop_oneof![3 => Just(Duration::ZERO), 1 => duration()],
        proptest::option::of(duration()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(prop_oneof![Just(0u32), 1u32..3, Just(u32::MAX)]),
        any::<bool>(),
        ttl(),
    );
    (timing, limits).prop_map(
        |(
            (node_timeout, connect_timeout, drift_factor, drift_fixed, retry_delay, wait),
            (min_validity, max_hold, max_renewals, max_attempts, fenced, ttl),
        )| Settings {
            node_timeout,
            connect_timeout,
            drift_factor,
            drift_fixed,
            retry_delay,
            wait,
            min_validity,
            max_hold,
            max_renewals,
            max_attempts,
            fenced,
            ttl,
        },
    )
}

/// Builds a client from `s` and, when that is accepted, takes, extends and
/// releases a lock with it; every error must be one a caller can act on.
async fn exercise(s: &Settings, node: &RedisServer, key: &str) -> Result<(), String> {
    let mut options = LockOptions::new()
        .retry_delay(s.retry_delay)
        .wait(s.wait)
        .min_validity(s.min_validity)
        .fenced(s.fenced);
    if let Some(max) = s.max_hold {
        options = options.max_hold(max);
    }
    if let Some(max) = s.max_renewals {
        options = options.max_renewals(max);
    }
    if let Some(max) = s.max_attempts {
        options = options.max_attempts(max);
    }
    let built = Redlock::builder()
        .node(node.url())
        .node_timeout(s.node_timeout)
        .connect_timeout(s.connect_timeout)
        .drift(s.drift_factor, s.drift_fixed)
        .options(options)
        .build();
    let redlock = match built {
        Ok(redlock) => redlock,
        Err(Error::Config(_)) => return Ok(()),
        Err(other) => return Err(format!("build: not a config error: {other}")),
    };
    // A lock that cannot be had in time is fine (a huge minimum validity,
    // a node timeout too short for any reply); a panic or a hang is not.
    // Settings that let `lock` wait longer than the bound between attempts
    // (a retry delay and a wait of minutes, a node timeout that fails
    // every attempt) are tried with `try_lock`: one attempt, no retry.
    let patient = s.wait > Duration::from_secs(2) && s.retry_delay > Duration::from_secs(2);
    let call = async {
        if patient {
            redlock
                .try_lock(key, s.ttl)
                .await
                .map(|taken| taken.ok_or("busy"))
        } else {
            redlock.lock(key, s.ttl).await.map(Ok)
        }
    };
    let outcome = match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok(Err(busy))) => return Err(format!("try_lock found a free key {busy}")),
        Ok(Ok(Ok(guard))) => Ok(Ok(guard)),
        Ok(Err(error)) => Ok(Err(error)),
        Err(elapsed) => Err(elapsed),
    };
    let mut guard = match outcome {
        Err(_) => return Err("lock did not return within 10 s on a free key".into()),
        Ok(Err(Error::Config(_) | Error::ValidityUsedUp { .. } | Error::Unreachable { .. })) => return Ok(()),
        Ok(Err(other)) => return Err(format!("lock: {other}")),
        Ok(Ok(guard)) => guard,
    };
    let extended = tokio::time::timeout(Duration::from_secs(10), guard.extend(s.ttl)).await;
    match extended {
        Err(_) => return Err("extend did not return within 10 s".into()),
        Ok(Ok(()) | Err(Error::ValidityUsedUp { .. } | Error::Lost { .. } | Error::Unreachable { .. })) => {}
        Ok(Err(other)) => return Err(format!("extend: {other}")),
    }
    match tokio::time::timeout(Duration::from_secs(10), guard.release()).await {
        Err(_) => return Err("release did not return within 10 s".into()),
        Ok(Ok(_) | Err(Error::Unreachable { .. })) => {}
        Ok(Err(other)) => return Err(format!("release: {other}")),
    }
    // Bounded, whatever it reports.
    let _ = redlock.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

#[test]
fn any_setting_is_a_config_error_or_a_working_lock() {
    // One node for every case (starting one per case would dominate the
    // run), owned by the test so that it stops with it: a server in a
    // `static` is never dropped and would outlive the test process.
    let node = RedisServer::start();
    let config = ProptestConfig {
        cases: 160,
        ..ProptestConfig::default()
    };
    proptest!(config, |(s in settings())| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Also panics in spawned tasks (the watchdog, connection drivers),
        // which run on this thread and which tokio would swallow.
        let probe = PanicProbe::start();
        let key = format!("props:{}", rand::random::<u64>());
        let outcome = runtime.block_on(exercise(&s, &node, &key));
        drop(runtime);
        prop_assert_eq!(probe.panics(), Vec::<String>::new());
        prop_assert!(outcome.is_ok(), "{:?}: {:?}", s, outcome);
    });
}
