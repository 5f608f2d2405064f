//! Tests of the simulated network: delivery, faults, closing, connecting,
//! and replay from a seed. All on the paused clock: every time asserted is
//! simulated.

use std::io::ErrorKind;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep, timeout};

use super::{Latency, Listener, Network, SimStream};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A listener on `"n0:6379"` and a connection to it from `"c0"`.
async fn connected(net: &Network) -> (Listener, SimStream, SimStream) {
    let mut listener = net.listen("n0:6379");
    let client = net.connect("c0", "n0:6379").await.expect("connect");
    let server = listener.accept().await.expect("accept");
    (listener, client, server)
}

/// One read, of whatever is readable (empty at EOF).
async fn read_some(stream: &mut SimStream) -> std::io::Result<Vec<u8>> {
    let mut buf = [0; 256];
    let n = stream.read(&mut buf).await?;
    Ok(buf[..n].to_vec())
}

#[tokio::test(start_paused = true)]
async fn connect_takes_a_round_trip_and_names_the_ends() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let start = Instant::now();
    let (_listener, client, server) = connected(&net).await;
    assert_eq!(start.elapsed(), ms(20));
    assert_eq!((client.local(), client.peer()), ("c0", "n0:6379"));
    assert_eq!((server.local(), server.peer()), ("n0:6379", "c0"));
}

#[tokio::test(start_paused = true)]
async fn a_segment_is_readable_after_its_latency() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, mut server) = connected(&net).await;
    let sent = Instant::now();
    client.write_all(b"ping").await.expect("write");
    assert_eq!(read_some(&mut server).await.expect("read"), b"ping");
    assert_eq!(sent.elapsed(), ms(10));
    server.write_all(b"pong").await.expect("write");
    assert_eq!(read_some(&mut client).await.expect("read"), b"pong");
    assert_eq!(sent.elapsed(), ms(20));
}

#[tokio::test(start_paused = true)]
async fn a_faster_segment_waits_for_the_one_before_it() {
    let net = Network::new(1, Latency::fixed(ms(50)));
    let (_listener, mut client, mut server) = connected(&net).await;
    let sent = Instant::now();
    client.write_all(b"slow ").await.expect("write");
    net.set_latency("n0", "c0", Latency::fixed(ms(1)));
    client.write_all(b"fast").await.expect("write");
    assert_eq!(read_some(&mut server).await.expect("read"), b"slow fast");
    assert_eq!(sent.elapsed(), ms(50));
    // The override applies both ways.
    server.write_all(b"back").await.expect("write");
    assert_eq!(read_some(&mut client).await.expect("read"), b"back");
    assert_eq!(sent.elapsed(), ms(51));
}

#[tokio::test(start_paused = true)]
async fn jittered_segments_arrive_in_order() {
    let net = Network::new(7, Latency::uniform(ms(1), ms(40)));
    let (_listener, mut client, mut server) = connected(&net).await;
    let writer = tokio::spawn(async move {
        for i in 0..100u8 {
            client.write_all(&[i]).await.expect("write");
            sleep(Duration::from_micros(300)).await;
        }
        client
    });
    let mut received = vec![0; 100];
    server.read_exact(&mut received).await.expect("read");
    assert_eq!(received, (0..100).collect::<Vec<u8>>());
    drop(writer.await.expect("writer"));
}

#[tokio::test(start_paused = true)]
async fn a_partition_holds_segments_until_healed() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, mut server) = connected(&net).await;
    let start = Instant::now();
    client.write_all(b"in flight ").await.expect("write");
    sleep(ms(5)).await;
    net.partition("c0", "n0");
    client.write_all(b"sent while cut").await.expect("write");
    assert!(
        timeout(ms(100), read_some(&mut server)).await.is_err(),
        "nothing crosses a partition"
    );
    net.heal("n0", "c0");
    assert_eq!(
        read_some(&mut server).await.expect("read"),
        b"in flight sent while cut"
    );
    assert_eq!(start.elapsed(), ms(5 + 100 + 10));
}

#[tokio::test(start_paused = true)]
async fn a_black_hole_holds_segments_but_not_those_delivered() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, mut server) = connected(&net).await;
    server.write_all(b"delivered").await.expect("write");
    sleep(ms(10)).await;
    net.black_hole("n0");
    client.write_all(b"held").await.expect("write");
    assert_eq!(read_some(&mut client).await.expect("read"), b"delivered");
    assert!(
        timeout(ms(50), read_some(&mut server)).await.is_err(),
        "nothing leaves a black hole"
    );
    // A partition still in force keeps the path cut after the black hole ends.
    net.partition("c0", "n0");
    net.unblack_hole("n0");
    assert!(
        timeout(ms(50), read_some(&mut server)).await.is_err(),
        "the partition still cuts"
    );
    net.heal("c0", "n0");
    let healed = Instant::now();
    assert_eq!(read_some(&mut server).await.expect("read"), b"held");
    assert_eq!(healed.elapsed(), ms(10));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_stream_resets_and_its_bytes_never_arrive() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, mut server) = connected(&net).await;
    client.write_all(b"never delivered").await.expect("write");
    drop(client);
    let error = read_some(&mut server).await.expect_err("reset");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset);
    let error = server.write_all(b"late").await.expect_err("reset");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset);
}

#[tokio::test(start_paused = true)]
async fn a_reset_discards_what_the_dropping_end_had_not_read() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, server) = connected(&net).await;
    client.write_all(b"unread by the server").await.expect("write");
    sleep(ms(20)).await;
    drop(server);
    let error = read_some(&mut client).await.expect_err("reset");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset);
}

#[tokio::test(start_paused = true)]
async fn shutdown_is_an_orderly_fin_after_the_data() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, mut server) = connected(&net).await;
    client.write_all(b"last words").await.expect("write");
    client.shutdown().await.expect("shutdown");
    client.shutdown().await.expect("a second shutdown");
    let error = client.write_all(b"more").await.expect_err("shut");
    assert_eq!(error.kind(), ErrorKind::BrokenPipe);
    assert_eq!(read_some(&mut server).await.expect("read"), b"last words");
    assert!(read_some(&mut server).await.expect("eof").is_empty());
    assert!(read_some(&mut server).await.expect("eof again").is_empty());
    // Half-closed: the other direction still works.
    server.write_all(b"reply").await.expect("write");
    assert_eq!(read_some(&mut client).await.expect("read"), b"reply");
}

#[tokio::test(start_paused = true)]
async fn a_stream_dropped_after_shutdown_still_delivers_its_fin() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_listener, mut client, mut server) = connected(&net).await;
    client.write_all(b"bye").await.expect("write");
    client.shutdown().await.expect("shutdown");
    drop(client);
    assert_eq!(read_some(&mut server).await.expect("read"), b"bye");
    assert!(read_some(&mut server).await.expect("eof").is_empty());
    server
        .write_all(b"to nobody")
        .await
        .expect("discarded, not failed");
}

#[tokio::test(start_paused = true)]
async fn reset_connections_breaks_only_the_hosts_connections() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let (_n0, mut c0, mut s0) = connected(&net).await;
    let mut n1 = net.listen("n1:6379");
    let mut c1 = net.connect("c0", "n1:6379").await.expect("connect");
    let mut s1 = n1.accept().await.expect("accept");
    c0.write_all(b"lost").await.expect("write");
    c1.write_all(b"kept").await.expect("write");
    net.reset_connections("n0");
    for stream in [&mut c0, &mut s0] {
        assert_eq!(
            read_some(stream).await.expect_err("reset").kind(),
            ErrorKind::ConnectionReset
        );
    }
    assert_eq!(read_some(&mut s1).await.expect("read"), b"kept");
    s1.write_all(b"ok").await.expect("write");
    assert_eq!(read_some(&mut c1).await.expect("read"), b"ok");
}

#[tokio::test(start_paused = true)]
async fn connect_is_refused_at_once_without_a_listener() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let start = Instant::now();
    let error = net.connect("c0", "n0:6379").await.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
    let mut listener = net.listen("n0:6379");
    net.close_listener("n0:6379");
    let error = net.connect("c0", "n0:6379").await.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(
        listener.accept().await.is_none(),
        "a closed listener accepts nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_listener_refuses_and_resets_its_backlog() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let listener = net.listen("n0:6379");
    let mut unaccepted = net.connect("c0", "n0:6379").await.expect("connect");
    drop(listener);
    let error = read_some(&mut unaccepted).await.expect_err("reset");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset);
    let error = net.connect("c0", "n0:6379").await.expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::ConnectionRefused);
}

#[tokio::test(start_paused = true)]
async fn connect_across_a_cut_path_waits_for_the_heal() {
    let net = Network::new(1, Latency::fixed(ms(10)));
    let mut listener = net.listen("n0:6379");
    net.partition("c0", "n0");
    assert!(
        timeout(ms(1000), net.connect("c0", "n0:6379")).await.is_err(),
        "no SYN crosses"
    );
    net.black_hole("n0");
    net.heal("c0", "n0");
    assert!(
        timeout(ms(1000), net.connect("c0", "n0:6379")).await.is_err(),
        "nor leaves a black hole"
    );
    let connecting = tokio::spawn({
        let net = net.clone();
        async move { net.connect("c0", "n0:6379").await }
    });
    sleep(ms(500)).await;
    let healed = Instant::now();
    net.unblack_hole("n0");
    let client = connecting.await.expect("task").expect("connect");
    assert_eq!(healed.elapsed(), ms(20));
    let server = listener.accept().await.expect("accept");
    assert_eq!(server.peer(), client.local());
}

/// A fixed exchange over a jittered network, returning its trace hash.
fn replay(seed: u64) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let net = Network::new(seed, Latency::uniform(ms(1), ms(30)));
        let (_listener, mut client, mut server) = connected(&net).await;
        let echo = tokio::spawn(async move {
            let mut buf = [0; 64];
            while let Ok(n @ 1..) = server.read(&mut buf).await {
                if server.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        for round in 0..20u8 {
            client.write_all(&[round; 3]).await.expect("write");
            let mut reply = [0; 3];
            client.read_exact(&mut reply).await.expect("read");
            if round == 10 {
                net.partition("c0", "n0");
                sleep(ms(50)).await;
                net.heal("c0", "n0");
            }
        }
        client.shutdown().await.expect("shutdown");
        echo.await.expect("echo");
        let stats = net.trace();
        assert_eq!((stats.segments, stats.bytes), (41, 120));
        stats.hash
    })
}

#[test]
fn one_seed_replays_to_the_same_trace() {
    assert_eq!(replay(42), replay(42));
    assert_ne!(replay(42), replay(43));
}
