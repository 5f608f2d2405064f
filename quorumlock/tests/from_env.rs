//! `Redlock::from_env`: a client configured by its environment alone, on
//! real nodes. One test in its own binary, because it sets the process
//! environment (no other thread of the process reads it meanwhile).

use std::time::{Duration, Instant};

use quorumlock::{Error, Redlock, Setting};
use quorumlock_testkit::{client, start_nodes, urls};

#[tokio::test]
async fn a_client_from_the_environment_locks_on_its_nodes_with_its_settings() {
    // SAFETY: the only test of this binary; nothing else reads the
    // environment while it is changed.
    unsafe { std::env::remove_var("QUORUMLOCK_NODES") };
    match Redlock::from_env() {
        Err(Error::Config(error)) => assert_eq!(error.setting(), Setting::Env("QUORUMLOCK_NODES"), "{error}"),
        other => panic!("expected a config error without nodes, got {other:?}"),
    }

    let servers = start_nodes(3);
    // SAFETY: as above.
    unsafe {
        std::env::set_var("QUORUMLOCK_NODES", urls(&servers).join(","));
        std::env::set_var("QUORUMLOCK_NODE_TIMEOUT", "500ms");
        std::env::set_var("QUORUMLOCK_WAIT", "300ms");
        std::env::set_var("QUORUMLOCK_RETRY_DELAY", "20ms");
    }
    let redlock = Redlock::from_env().expect("a client from the environment");
    assert_eq!(redlock.nodes(), 3);

    let guard = client(&servers)
        .lock("env:job", Duration::from_secs(10))
        .await
        .expect("lock");
    // While another owner holds it, the client waits the environment's
    // 300 ms, not the default 10 s.
    let started = Instant::now();
    let outcome = redlock.lock("env:job", Duration::from_secs(10)).await;
    let elapsed = started.elapsed();
    assert!(matches!(outcome, Err(Error::Held { .. })), "{outcome:?}");
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "waited {elapsed:?}"
    );
    guard.release().await.expect("release");
    let taken = redlock
        .try_lock("env:job", Duration::from_secs(10))
        .await
        .expect("try_lock");
    assert!(
        taken.is_some(),
        "the nodes from the environment are the nodes locked on"
    );
}
