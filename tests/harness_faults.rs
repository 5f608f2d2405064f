//! The chaos suite's fault injection works against real redis-server
//! processes: the proxy's latency, black hole, refusal, reset and drop; the
//! clock-skew shim's rate, offset and run-time jumps; kill + restart with and
//! without AOF.

mod support;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const WAIT: Duration = Duration::from_millis(300);

async fn connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    redis::Client::open(url)?.get_multiplexed_async_connection().await
}

async fn ping(conn: &mut MultiplexedConnection) -> redis::RedisResult<String> {
    redis::cmd("PING").query_async(conn).await
}

/// A new connection through `url` answers PING, within a second.
async fn fresh_ping(url: &str) -> redis::RedisResult<String> {
    timeout(Duration::from_secs(1), async {
        ping(&mut connect(url).await?).await
    })
    .await
    .expect("no answer within 1 s")
}

#[tokio::test]
async fn proxy_forwards_ping_set_get() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    assert_ne!(proxy.port(), server.port());
    let mut conn = connect(&proxy.url()).await.unwrap();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let got: Option<String> = redis::cmd("GET").arg("k").query_async(&mut conn).await.unwrap();
    assert_eq!(got.as_deref(), Some("v"));
    assert_eq!(get(&server, "k").as_deref(), Some("v"), "the node has it");
}

#[tokio::test]
async fn latency_delays_each_direction() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut conn = connect(&proxy.url()).await.unwrap();
    proxy.set_latency(Duration::from_millis(50));
    let started = Instant::now();
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    let rtt = started.elapsed();
    assert!(rtt >= Duration::from_millis(100), "{rtt:?}");
    assert!(rtt < Duration::from_secs(1), "{rtt:?}");
    proxy.heal();
    let started = Instant::now();
    ping(&mut conn).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(100), "healed");
}

#[tokio::test]
async fn latency_keeps_order_and_pipelines() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.set_latency(Duration::from_millis(50));
    let mut stream = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
    let started = Instant::now();
    // 20 separate chunks, 5 ms apart: with a 50 ms delay per chunk and
    // direction, one after the other would take 20 x 100 ms.
    for i in 0..20 {
        let arg = format!("{i},");
        let request = format!("*3\r\n$6\r\nAPPEND\r\n$1\r\nk\r\n${}\r\n{arg}\r\n", arg.len());
        stream.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut replies = Vec::new();
    let mut buf = [0u8; 1024];
    while replies.iter().filter(|&&b| b == b'\n').count() < 20 {
        let n = timeout(Duration::from_secs(2), stream.read(&mut buf))
            .await
            .expect("replies within 2 s")
            .unwrap();
        assert!(n > 0, "proxy closed the connection");
        replies.extend_from_slice(&buf[..n]);
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_millis(900),
        "head-of-line wait: {elapsed:?}"
    );
    let expected: String = (0..20).map(|i| format!("{i},")).collect();
    assert_eq!(get(&server, "k"), Some(expected), "chunks arrived in order");
}

#[tokio::test]
async fn black_hole_hangs_requests_and_heal_serves_new_ones() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut old = connect(&proxy.url()).await.unwrap();
    ping(&mut old).await.unwrap();
    let pings = calls(&server, "ping");
    proxy.black_hole();
    assert!(
        timeout(WAIT, ping(&mut old)).await.is_err(),
        "existing connection answered"
    );
    let url = proxy.url();
    let new = timeout(WAIT, async { ping(&mut connect(&url).await?).await }).await;
    assert!(new.is_err(), "new connection answered: {new:?}");
    assert_eq!(calls(&server, "ping"), pings, "nothing reached the node");
    proxy.heal();
    assert_eq!(fresh_ping(&proxy.url()).await.unwrap(), "PONG");
}

#[tokio::test]
async fn refuse_fails_new_connections_and_cuts_old_ones() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut old = connect(&proxy.url()).await.unwrap();
    ping(&mut old).await.unwrap();
    proxy.refuse();
    let started = Instant::now();
    fresh_ping(&proxy.url())
        .await
        .expect_err("new connection refused");
    assert!(started.elapsed() < WAIT, "refused at once, not timed out");
    let cut = timeout(Duration::from_secs(1), ping(&mut old)).await;
    assert!(matches!(cut, Ok(Err(_))), "existing connection cut: {cut:?}");
    proxy.heal();
    assert_eq!(fresh_ping(&proxy.url()).await.unwrap(), "PONG");
}

#[tokio::test]
async fn reset_cuts_an_existing_connection() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut conn = connect(&proxy.url()).await.unwrap();
    ping(&mut conn).await.unwrap();
    proxy.reset();
    let cut = timeout(Duration::from_secs(1), ping(&mut conn)).await;
    assert!(matches!(cut, Ok(Err(_))), "the client sees an error: {cut:?}");
    assert_eq!(fresh_ping(&proxy.url()).await.unwrap(), "PONG", "new ones work");

    // At the socket level the cut is an RST, not a FIN.
    let mut raw = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
    raw.write_all(PING).await.unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(raw.read(&mut buf).await.unwrap(), 7, "+PONG");
    proxy.reset();
    let read = timeout(Duration::from_secs(1), raw.read(&mut buf)).await.unwrap();
    let kind = read.expect_err("reset, not end of stream").kind();
    assert_eq!(kind, std::io::ErrorKind::ConnectionReset);
}

#[tokio::test]
async fn dropping_the_proxy_aborts_its_tasks_and_connections() {
    let server = RedisServer::start();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let proxy = Proxy::start(server.port());
    let port = proxy.port();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut raw = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        raw.write_all(PING).await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(raw.read(&mut buf).await.unwrap(), 7, "+PONG");
        clients.push(raw);
    }
    assert_eq!(
        metrics.num_alive_tasks(),
        before + 4,
        "accept task + 3 connections"
    );
    drop(proxy);
    for raw in &mut clients {
        let _ = raw.write_all(PING).await;
        let mut buf = [0u8; 64];
        let read = timeout(Duration::from_secs(1), raw.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "connection cut: {read:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while metrics.num_alive_tasks() > before {
        assert!(Instant::now() < deadline, "proxy tasks still alive");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        TcpStream::connect(("127.0.0.1", port)).await.is_err(),
        "port closed"
    );
}
