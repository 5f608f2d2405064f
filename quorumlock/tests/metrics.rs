//! The library's metrics as a Prometheus scrape shows them, against what the
//! test did: lock calls by outcome, attempts, holds, renewals, a loss and
//! the errors of a node that is down. One recorder per process, so one test
//! binary of its own.

use std::collections::HashMap;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use quorumlock::{LockOptions, Redlock};
use quorumlock_testkit::server::{self, RedisServer};

/// The value of every sample in `scrape` whose name and labels start as
/// `series` (`name{label="v",...`): counters and histogram counts summed.
fn value(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#') && line.starts_with(series))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn scrape(handle: &PrometheusHandle) -> String {
    handle.run_upkeep();
    handle.render()
}

/// Takes `resource` on 2 of `redlock`'s 3 nodes, releases it and shuts the
/// client down: the shutdown waits for the requests no caller waited for,
/// and so for their errors to be counted before the scrape.
async fn lock_release_and_shut_down(redlock: &Redlock, resource: &str, ttl: Duration) {
    let guard = redlock
        .try_lock(resource, ttl)
        .await
        .expect("no error")
        .expect("2 of 3");
    guard.release().await.expect("released");
    let report = redlock.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_what_the_locks_did() {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder");
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = Redlock::builder()
        .nodes(server::urls(&servers))
        .build()
        .expect("client");
    let ttl = Duration::from_secs(3);

    // Contention: one holder, then try_lock calls that find it busy.
    let held = redlock
        .try_lock("metrics:a", ttl)
        .await
        .expect("no error")
        .expect("held");
    let mut busy = 0;
    for _ in 0..5 {
        if redlock
            .try_lock("metrics:a", ttl)
            .await
            .expect("no error")
            .is_none()
        {
            busy += 1;
        }
    }
    assert_eq!(busy, 5);
    // A waiter that is handed the lock: one `lock` call, its attempts.
    let waiter = redlock
        .with_options(LockOptions::new().wait(Duration::from_secs(5)))
        .expect("options");
    let waiting = tokio::spawn(async move { waiter.lock("metrics:a", ttl).await });
    // Released once the waiter is in line (after its first attempt).
    let since = std::time::Instant::now();
    while servers.iter().all(|s| {
        s.command(&["ZCARD", "quorumlock:waiters:{metrics:a}"])
            .expect("ZCARD")
            .starts_with(":0")
    }) {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.expect("released");
    let taken = waiting.await.expect("waiter").expect("handed over");
    assert!(taken.acquisition().attempts() >= 2, "{:?}", taken.acquisition());
    assert!(taken.acquisition().waited() > Duration::ZERO);
    assert!(
        (2..=3).contains(&taken.acquisition().confirmed()),
        "{:?}",
        taken.acquisition()
    );
    let lock_attempts = taken.acquisition().attempts();
    // Held past a renewal (a third of the ttl), then released.
    tokio::time::sleep(ttl / 2).await;
    taken.release().await.expect("released");

    // A node down: its errors are counted under its name.
    let down = servers.pop().expect("a server");
    let down_name = format!("127.0.0.1:{}/0", down.port());
    drop(down);
    // The down node's requests may fail after the other two answered.
    lock_release_and_shut_down(&redlock, "metrics:b", ttl).await;

    // A node that accepts connections and never answers: the other two
    // decide every call long before it fails, so its errors are counted
    // only by the requests no caller waits for.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let silent_name = format!("127.0.0.1:{}/0", silent.local_addr().expect("addr").port());
    let beside_silent = Redlock::builder()
        .nodes(server::urls(&servers))
        .node(format!("redis://{}", silent.local_addr().expect("addr")))
        .build()
        .expect("client");
    lock_release_and_shut_down(&beside_silent, "metrics:c", ttl).await;

    let text = scrape(&handle);
    let acquired = value(
        &text,
        "quorumlock_acquisitions_total{call=\"try_lock\",outcome=\"acquired\"}",
    );
    let busy_seen = value(
        &text,
        "quorumlock_acquisitions_total{call=\"try_lock\",outcome=\"busy\"}",
    );
    let locked = value(
        &text,
        "quorumlock_acquisitions_total{call=\"lock\",outcome=\"acquired\"}",
    );
    assert_eq!((acquired, busy_seen, locked), (3.0, 5.0, 1.0), "{text}");
    let attempts = value(&text, "quorumlock_attempt_duration_seconds_count");
    assert_eq!(attempts, 3.0 + 5.0 + f64::from(lock_attempts), "{text}");
    assert_eq!(
        value(&text, "quorumlock_hold_duration_seconds_count{end=\"released\"}"),
        4.0,
        "{text}"
    );
    assert!(
        value(&text, "quorumlock_renewals_total{outcome=\"confirmed\"}") >= 1.0,
        "{text}"
    );
    assert!(value(&text, "quorumlock_handoff_wakeups_total") >= 1.0, "{text}");
    let errors = value(
        &text,
        &format!("quorumlock_node_errors_total{{node=\"{down_name}\""),
    );
    assert!(errors >= 1.0, "no error counted for {down_name}: {text}");
    let silent_errors = value(
        &text,
        &format!("quorumlock_node_errors_total{{node=\"{silent_name}\""),
    );
    assert!(silent_errors >= 1.0, "no error counted for {silent_name}: {text}");
    let labels: HashMap<&str, ()> = text
        .lines()
        .filter(|line| line.starts_with("quorumlock_node_errors_total"))
        .map(|line| (line, ()))
        .collect();
    assert!(
        labels.keys().all(|line| !line.contains("metrics:")),
        "a resource name in a label: {text}"
    );
}
