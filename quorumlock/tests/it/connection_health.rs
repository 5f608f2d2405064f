//! Connection health: a node connection that silently stops answering is
//! replaced without restarting anything, one the node closed while the
//! client sat idle costs no attempt, a node that is merely paused keeps its
//! connection (and so the order of its requests), and a subscriber
//! reconnects to a node that is down at a bounded pace.

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::{Proxy, RedisServer, all_empty, eventually, get, start_nodes, urls, warm_up};
use tokio::time::Instant;

/// The per-node timeout of these tests.
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// The connect timeout of these tests; the node's stall limit is this long.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How soon lock operations must work again after the connection went
/// silent: the stall limit (the connect timeout) is reached after a few
/// timed-out attempts, one new connection to a healthy path takes a round
/// trip, and the attempt on it succeeds at once.
const RECOVERY: Duration = Duration::from_millis(3 * 200 + 500);

fn client_through(urls: Vec<String>) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .expect("valid test config")
}

/// A connection whose flow went silent (a half-open flow behind a firewall:
/// nothing answered, nothing closed) while new connections to the node work
/// is replaced by the node itself, within a bound, with no restart of the
/// node and no error from the connection.
#[tokio::test]
async fn lock_operations_recover_from_a_silent_connection_without_a_restart() {
    let servers = start_nodes(1);
    let server = &servers[0];
    let pid = server.pid();
    let proxy = Proxy::start(server.port());
    let redlock = client_through(vec![proxy.url()]);
    warm_up(&redlock).await;
    let connections = proxy.connections();
    proxy.black_hole_existing();
    let silent = Instant::now();
    let mut attempts = 0;
    let guard = loop {
        attempts += 1;
        match redlock.try_lock("recover", Duration::from_secs(10)).await {
            Ok(Some(guard)) => break guard,
            Ok(None) => panic!("nobody else holds the resource"),
            Err(error) => assert!(
                silent.elapsed() < RECOVERY,
                "still failing after {:?} ({attempts} attempts): {error}",
                silent.elapsed()
            ),
        }
    };
    assert!(
        silent.elapsed() < RECOVERY,
        "locked again after {:?}",
        silent.elapsed()
    );
    assert!(attempts > 1, "the first attempt went to the silent connection");
    assert!(proxy.connections() > connections, "served by a new connection");
    assert_eq!(server.pid(), pid, "the node was not restarted");
    assert!(get(server, "recover").is_some(), "the lock is on the node");
    guard.release().await.unwrap();
    assert_eq!(get(server, "recover"), None, "released on the new connection");
}

/// A connection the node closed while the client sat idle (a restart, an
/// idle `timeout`, a reset) is found closed only by the next request, which
/// then goes again on a new connection: a client of one node gets the lock
/// at its first attempt instead of reporting the node unreachable.
#[tokio::test]
async fn a_connection_closed_while_idle_costs_no_attempt() {
    let servers = start_nodes(1);
    let proxy = Proxy::start(servers[0].port());
    let redlock = client_through(vec![proxy.url()]);
    warm_up(&redlock).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let alive = metrics.num_alive_tasks();
    let connections = proxy.connections();
    proxy.reset();
    // The connection's I/O task ends once it has read the reset: from then
    // on the connection is closed, and the client does not know it yet.
    eventually(
        "the connection's I/O task saw the reset",
        Duration::from_secs(5),
        || metrics.num_alive_tasks() < alive,
    )
    .await;
    let guard = redlock
        .try_lock("closed-while-idle", Duration::from_secs(10))
        .await
        .expect("the node is up: its closed connection is not a failure")
        .expect("nobody else holds the resource");
    assert!(proxy.connections() > connections, "served by a new connection");
    assert!(
        get(&servers[0], "closed-while-idle").is_some(),
        "the lock is on the node"
    );
    guard.release().await.unwrap();
}

/// The ids of the clients connected to `server`, but for the connection
/// that asks.
fn client_ids(server: &RedisServer) -> Vec<u64> {
    let reply = server.command(&["CLIENT", "LIST"]).expect("CLIENT LIST");
    reply
        .lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")))
        .filter_map(|id| id.parse().ok())
        .collect()
}

/// A paused node (SIGSTOP: connections are accepted but nothing is
/// answered) does not answer a new connection either, so its connection is
/// kept across stalls far longer than the stall limit: the requests queued
/// on it run in the order they were sent once the node resumes (each failed
/// attempt's release after its SET: no key is left), and the node serves the
/// next lock on that same connection.
#[tokio::test]
async fn a_paused_node_keeps_its_connection_and_its_request_order() {
    /// Long enough for several stalls and probes of the connection.
    const PAUSE: Duration = Duration::from_millis(4 * 500);
    let servers = start_nodes(1);
    let server = &servers[0];
    let redlock = client_through(vec![server.url()]);
    warm_up(&redlock).await;
    let before = client_ids(server);
    assert_eq!(before.len(), 1, "the client's one request connection: {before:?}");
    let paused = server.pause();
    let started = Instant::now();
    let mut attempts = 0;
    while started.elapsed() < PAUSE {
        attempts += 1;
        let outcome = redlock
            .try_lock(format!("paused-{attempts}"), Duration::from_secs(30))
            .await;
        assert!(outcome.is_err(), "a paused node grants nothing: {outcome:?}");
    }
    drop(paused);
    all_empty(&servers, Duration::from_secs(5)).await;
    let guard = redlock
        .try_lock("after", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    guard.release().await.unwrap();
    eventually(
        "the probe connections made during the pause are closed",
        Duration::from_secs(5),
        || client_ids(server) == before,
    )
    .await;
}

/// Whether some client is subscribed to a wake-up channel on `server`.
fn has_subscriber(server: &RedisServer) -> bool {
    let reply = server
        .command(&["PUBSUB", "CHANNELS", "quorumlock:wake:*"])
        .expect("PUBSUB");
    reply.contains("quorumlock:wake:")
}

/// A subscriber whose node refuses every connection keeps trying, at a
/// capped exponential pace rather than every 100 ms, and is back as soon as
/// the node is.
#[tokio::test]
async fn a_subscriber_reconnects_to_a_refusing_node_at_a_bounded_pace() {
    /// The time over which attempts are counted.
    const WINDOW: Duration = Duration::from_secs(3);
    /// Attempts allowed in the window: pauses starting at 50-100 ms and
    /// doubling allow at most 5 in 3 s; a fixed 100 ms pace makes about 30.
    const MOST: u64 = 8;
    /// Attempts the window must see at least: the pauses are at most
    /// 100, 200, 400, 800 ms, so the subscriber tries at least four times.
    const LEAST: u64 = 2;
    /// How soon it is back once the node is: the longest pause (5 s) plus
    /// a connection.
    const REJOIN: Duration = Duration::from_secs(6);
    let servers = start_nodes(3);
    let proxy = Proxy::start(servers[2].port());
    // The holder reaches every node directly: only the waiter's client goes
    // through the proxy.
    let holder = client_through(urls(&servers));
    let _held = holder
        .try_lock("contended", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    // Polls only every 30 s or more, so that after its first attempts the
    // connections through the proxy are its subscriber's.
    let waiting = Redlock::builder()
        .nodes(vec![servers[0].url(), servers[1].url(), proxy.url()])
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .retry_delay(Duration::from_secs(60))
        .wait(Duration::from_secs(60))
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move { waiting.lock("contended", Duration::from_secs(30)).await });
    eventually(
        "the waiter subscribed through the proxy",
        Duration::from_secs(5),
        || has_subscriber(&servers[2]),
    )
    .await;
    proxy.refuse();
    let before = proxy.connections();
    tokio::time::sleep(WINDOW).await;
    let tried = proxy.connections() - before;
    assert!(
        (LEAST..=MOST).contains(&tried),
        "{tried} connection attempts through the refusing proxy in {WINDOW:?}"
    );
    proxy.heal();
    eventually("the subscriber is back", REJOIN, || has_subscriber(&servers[2])).await;
    waiter.abort();
}
