//! Bad input is a `Config` error naming the setting, never a panic and
//! never a network call.

use std::time::Duration;

use quorumlock::{Error, Redlock, Setting};
use quorumlock_testkit::{RedisServer, client, get};

/// The message of the `Config` error `result` must be, about `setting`.
fn config_error<T: std::fmt::Debug>(setting: Setting, result: Result<T, Error>) -> String {
    match result {
        Err(Error::Config(error)) => {
            assert_eq!(error.setting(), setting, "{error}");
            error.to_string()
        }
        other => panic!("expected a Config error about {setting:?}, got {other:?}"),
    }
}

#[test]
fn empty_node_list_is_rejected() {
    let message = config_error(Setting::Nodes, Redlock::builder().build());
    assert!(message.contains("no nodes"), "{message}");
    let none: [&str; 0] = [];
    config_error(Setting::Nodes, Redlock::builder().nodes(none).build());
}

#[test]
fn bad_urls_are_rejected_without_leaking_the_password() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:notaport",
    ] {
        config_error(Setting::Nodes, Redlock::builder().node(url).build());
    }
    let message = config_error(
        Setting::Nodes,
        Redlock::builder().node("ftp://user:hunter2@127.0.0.1:1").build(),
    );
    assert!(!message.contains("hunter2"), "{message}");
}

#[test]
fn bad_timing_settings_are_rejected() {
    let node = "redis://127.0.0.1:1";
    config_error(
        Setting::NodeTimeout,
        Redlock::builder().node(node).node_timeout(Duration::ZERO).build(),
    );
    config_error(
        Setting::ConnectTimeout,
        Redlock::builder()
            .node(node)
            .connect_timeout(Duration::ZERO)
            .build(),
    );
    config_error(
        Setting::Drift,
        Redlock::builder().node(node).drift(1.5, Duration::ZERO).build(),
    );
    config_error(
        Setting::Drift,
        Redlock::builder().node(node).drift(-0.1, Duration::ZERO).build(),
    );
    config_error(
        Setting::Drift,
        Redlock::builder()
            .node(node)
            .drift(f64::NAN, Duration::ZERO)
            .build(),
    );
    config_error(
        Setting::MaxAttempts,
        Redlock::builder().node(node).max_attempts(0).build(),
    );
}

#[test]
fn valid_urls_build_without_connecting() {
    // Nothing listens on these: building must not try to connect.
    let redlock = Redlock::builder()
        .nodes([
            "redis://127.0.0.1:1",
            "redis://user:secret@127.0.0.1:2/3",
            "redis://:secret@localhost:4",
            "unix:///tmp/quorumlock-test-nonexistent.sock",
        ])
        .build()
        .expect("valid settings");
    assert_eq!((redlock.nodes(), redlock.quorum()), (4, 3));
    assert!(!format!("{redlock:?}").contains("secret"));
}

/// Input checked per call fails before anything is sent: the node here does
/// not exist, so a network attempt would give `Unreachable` instead.
#[tokio::test]
async fn bad_lock_input_is_rejected_before_any_request() {
    let redlock = Redlock::builder()
        .node("redis://127.0.0.1:1")
        .node_timeout(Duration::from_millis(100))
        .min_validity(Duration::from_secs(5))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(10);
    config_error(Setting::Ttl, redlock.try_lock("r", Duration::ZERO).await);
    config_error(
        Setting::Ttl,
        redlock.try_lock("r", Duration::from_micros(500)).await,
    );
    config_error(Setting::Resources, redlock.try_lock("", ttl).await);
    config_error(
        Setting::Resources,
        redlock.try_lock(Vec::<String>::new(), ttl).await,
    );
    config_error(Setting::Resources, redlock.try_lock(["a", ""], ttl).await);
    config_error(Setting::Resources, redlock.try_lock(["a", "a"], ttl).await);
    config_error(Setting::Resources, redlock.lock("", ttl).await);
    // Drift (1 % + 2 ms) plus the node timeout leave nothing of a 100 ms ttl.
    config_error(
        Setting::Ttl,
        redlock.try_lock("r", Duration::from_millis(100)).await,
    );
    // A ttl that cannot leave the 5 s minimum validity.
    let message = config_error(Setting::Ttl, redlock.try_lock("r", Duration::from_secs(5)).await);
    assert!(message.contains("minimum validity"), "{message}");
}

#[tokio::test]
async fn drift_larger_than_the_ttl_is_rejected() {
    let redlock = Redlock::builder()
        .node("redis://127.0.0.1:1")
        .drift(0.0, Duration::from_secs(2))
        .build()
        .unwrap();
    let message = config_error(Setting::Ttl, redlock.try_lock("r", Duration::from_secs(1)).await);
    assert!(message.contains("drift"), "{message}");
}

#[tokio::test]
async fn bad_extend_ttl_is_rejected_and_keeps_the_lock() {
    let server = RedisServer::start();
    let redlock = client(std::slice::from_ref(&server));
    let mut guard = redlock
        .try_lock("r", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let before = guard.valid_until();
    config_error(Setting::Ttl, guard.extend(Duration::ZERO).await);
    assert_eq!(guard.valid_until(), before);
    assert_eq!(get(&server, "r").as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}
