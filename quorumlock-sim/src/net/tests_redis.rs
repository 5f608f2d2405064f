//! redis-rs's real client over the simulated network, against a hand-written
//! responder that answers `+PONG` to PING and `+OK` to anything else (the
//! connection handshake pipelines two `CLIENT SETINFO`s before any command).

use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

use super::{Latency, Network, SimStream};

/// Reads one RESP array of bulk strings (a command as clients send it).
async fn read_command(reader: &mut BufReader<SimStream>) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    reader.read_line(&mut line).await.ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0; len + 2];
        reader.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}

/// The reply to one command: a confirmation and one message for SUBSCRIBE
/// (as if published at once), PONG for PING, OK for the rest.
fn reply_to(args: &[Vec<u8>]) -> Vec<u8> {
    let name = args.first().map(|n| n.to_ascii_uppercase()).unwrap_or_default();
    match (name.as_slice(), args.get(1)) {
        (b"PING", _) => b"+PONG\r\n".to_vec(),
        (b"SUBSCRIBE", Some(channel)) => {
            let channel = String::from_utf8_lossy(channel);
            let len = channel.len();
            format!(
                "*3\r\n$9\r\nsubscribe\r\n${len}\r\n{channel}\r\n:1\r\n\
                 *3\r\n$7\r\nmessage\r\n${len}\r\n{channel}\r\n$5\r\nhello\r\n"
            )
            .into_bytes()
        }
        _ => b"+OK\r\n".to_vec(),
    }
}

/// Answers commands until the connection ends, returning them.
async fn respond(stream: SimStream) -> Vec<String> {
    let mut reader = BufReader::new(stream);
    let mut seen = Vec::new();
    while let Some(args) = read_command(&mut reader).await {
        let reply = reply_to(&args);
        seen.push(
            args.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
                .join(" "),
        );
        if reader.get_mut().write_all(&reply).await.is_err() {
            break;
        }
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn redis_rs_pings_over_the_simulated_network() {
    let net = Network::new(3, Latency::fixed(Duration::from_millis(5)));
    let start = Instant::now();
    let (mut conn, driver, server) = multiplexed(&net).await;
    // The connect is one round trip, and so is the handshake (one pipelined write).
    assert_eq!(start.elapsed(), Duration::from_millis(20));
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.expect("ping");
    assert_eq!(pong, "PONG");
    assert_eq!(start.elapsed(), Duration::from_millis(30));
    drop(conn);
    driver.await.expect("driver ends with its connection");
    let seen = server.await.expect("responder");
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[0].starts_with("CLIENT SETINFO LIB-NAME"), "{seen:?}");
    assert!(seen[1].starts_with("CLIENT SETINFO LIB-VER"), "{seen:?}");
    assert_eq!(seen[2], "PING");
}

/// A multiplexed connection to a responder on `"n0:6379"`, its driver
/// spawned, and the responder's task.
async fn multiplexed(
    net: &Network,
) -> (
    redis::aio::MultiplexedConnection,
    JoinHandle<()>,
    JoinHandle<Vec<String>>,
) {
    let mut listener = net.listen("n0:6379");
    let server = tokio::spawn(async move { respond(listener.accept().await.expect("accept")).await });
    let stream = net.connect("c0", "n0:6379").await.expect("connect");
    let info = redis::IntoConnectionInfo::into_connection_info("redis://n0:6379").expect("url");
    let (conn, driver) = redis::aio::MultiplexedConnection::new_with_config(
        info.redis_settings(),
        stream,
        redis::AsyncConnectionConfig::new(),
    )
    .await
    .expect("handshake");
    (conn, tokio::spawn(driver), server)
}

#[tokio::test(start_paused = true)]
async fn redis_rs_sees_a_reset_connection_as_an_io_error() {
    let net = Network::new(3, Latency::fixed(Duration::from_millis(5)));
    let (mut conn, driver, server) = multiplexed(&net).await;
    // Reset while the PING is in flight: its reply never comes.
    let ping = tokio::spawn(async move {
        let result = redis::cmd("PING").query_async::<String>(&mut conn).await;
        (result, conn)
    });
    sleep(Duration::from_millis(2)).await;
    net.reset_connections("n0");
    let (result, mut conn) = ping.await.expect("ping task");
    let error = result.expect_err("reset in flight");
    assert!(
        error.is_connection_dropped() && error.is_unrecoverable_error(),
        "{error:?}"
    );
    // The driver has ended: later commands fail at once.
    driver.await.expect("driver");
    let error = redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .expect_err("closed");
    assert!(
        error.is_connection_dropped() && error.is_unrecoverable_error(),
        "{error:?}"
    );
    server.await.expect("responder");
}

#[tokio::test(start_paused = true)]
async fn redis_rs_pubsub_receives_over_the_simulated_network() {
    let net = Network::new(3, Latency::fixed(Duration::from_millis(5)));
    let mut listener = net.listen("n0:6379");
    let server = tokio::spawn(async move { respond(listener.accept().await.expect("accept")).await });
    let stream = net.connect("c0", "n0:6379").await.expect("connect");
    let info = redis::IntoConnectionInfo::into_connection_info("redis://n0:6379").expect("url");
    let mut pubsub = redis::aio::PubSub::new(info.redis_settings(), stream)
        .await
        .expect("handshake");
    pubsub.subscribe("ch").await.expect("subscribe");
    let message = pubsub.on_message().next().await.expect("a message");
    assert_eq!(message.get_channel_name(), "ch");
    assert_eq!(message.get_payload::<String>().expect("payload"), "hello");
    drop(pubsub);
    let seen = server.await.expect("responder");
    assert_eq!(seen.last().map(String::as_str), Some("SUBSCRIBE ch"), "{seen:?}");
}
