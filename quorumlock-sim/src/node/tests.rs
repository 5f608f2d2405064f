//! The simulated node driven by the real client (redis-rs) on the paused
//! Tokio clock: handshake, expiry on a skewed clock, faults, pub/sub.

use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisConnectionInfo, Value};
use tokio::time::Instant;

use super::{NodeClock, SimNode};

mod diff;
mod scripts;
mod wire;

const EPOCH_MS: u64 = 1_700_000_000_000;

fn node(clock: NodeClock) -> SimNode {
    SimNode::new("n1", EPOCH_MS, Instant::now(), clock)
}

fn info() -> RedisConnectionInfo {
    let info = "redis://sim/".into_connection_info().expect("a valid url");
    info.redis_settings().clone()
}

/// A stream to `node`, served by a task of its own.
fn stream(node: &SimNode) -> tokio::io::DuplexStream {
    let (client, server) = tokio::io::duplex(1 << 16);
    let node = node.clone();
    tokio::spawn(async move { node.serve(server).await });
    client
}

async fn connect(node: &SimNode) -> MultiplexedConnection {
    // No response timeout: a paused node keeps a request waiting for as
    // long as the test says.
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    let (con, driver) = MultiplexedConnection::new_with_config(&info(), stream(node), config)
        .await
        .expect("the handshake succeeds");
    tokio::spawn(driver);
    con
}

async fn query(con: &mut MultiplexedConnection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(con).await
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

#[tokio::test(start_paused = true)]
async fn the_real_client_connects_and_runs_commands() {
    let node = node(NodeClock::default());
    let mut con = connect(&node).await;
    assert_eq!(
        query(&mut con, &["PING"]).await.unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(
        query(&mut con, &["SET", "k", "v", "NX", "PX", "1000"])
            .await
            .unwrap(),
        Value::Okay
    );
    assert_eq!(
        query(&mut con, &["SET", "k", "w", "NX", "PX", "1000"])
            .await
            .unwrap(),
        Value::Nil
    );
    assert_eq!(query(&mut con, &["GET", "k"]).await.unwrap(), bulk("v"));
    assert_eq!(node.get("k").as_deref(), Some("v"));
    assert_eq!(node.live_keys(), [("k".to_owned(), "v".to_owned())]);
    let error = query(&mut con, &["NOPE", "x"]).await.unwrap_err();
    assert_eq!(error.code(), Some("ERR"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn keys_expire_on_the_nodes_own_clock() {
    // Twice as fast: a 1000 ms ttl lasts 500 ms of simulated time.
    let node = node(NodeClock {
        offset_ms: 0,
        rate: 2.0,
    });
    let mut con = connect(&node).await;
    query(&mut con, &["SET", "k", "v", "PX", "1000"]).await.unwrap();
    tokio::time::advance(Duration::from_millis(499)).await;
    assert_eq!(query(&mut con, &["PTTL", "k"]).await.unwrap(), Value::Int(2));
    tokio::time::advance(Duration::from_millis(2)).await;
    assert_eq!(query(&mut con, &["GET", "k"]).await.unwrap(), Value::Nil);
    // A jump forward expires a key at once.
    query(&mut con, &["SET", "j", "v", "PX", "10000"]).await.unwrap();
    node.set_clock(NodeClock {
        offset_ms: 20_000,
        rate: 2.0,
    });
    assert_eq!(node.live_keys(), []);
    assert_eq!(query(&mut con, &["EXISTS", "j"]).await.unwrap(), Value::Int(0));
}

#[tokio::test(start_paused = true)]
async fn a_crash_ends_connections_and_keeps_keys_only_with_persistence() {
    let node = node(NodeClock::default());
    let mut con = connect(&node).await;
    let sha = query(&mut con, &["SCRIPT", "LOAD", "return 1"]).await.unwrap();
    let sha = redis::from_redis_value::<String>(sha).unwrap();
    query(&mut con, &["SET", "k", "v", "PX", "5000"]).await.unwrap();
    node.crash(true);
    assert!(query(&mut con, &["PING"]).await.is_err(), "the connection ended");
    assert_eq!(node.get("k").as_deref(), Some("v"), "persisted");
    let mut con = connect(&node).await;
    let noscript = query(&mut con, &["EVALSHA", &sha, "0"]).await.unwrap_err();
    assert_eq!(noscript.code(), Some("NOSCRIPT"));
    tokio::time::advance(Duration::from_millis(5001)).await;
    assert_eq!(node.get("k"), None, "its absolute expiry survived too");
    query(&mut con, &["SET", "k", "v"]).await.unwrap();
    node.crash(false);
    assert_eq!(node.live_keys(), []);
}

#[tokio::test(start_paused = true)]
async fn a_paused_node_answers_only_after_resuming() {
    let node = node(NodeClock::default());
    let mut con = connect(&node).await;
    node.pause();
    let mut waiting = con.clone();
    let pending = tokio::spawn(async move { query(&mut waiting, &["SET", "k", "v"]).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!pending.is_finished(), "nothing runs while paused");
    assert_eq!(node.get("k"), None);
    node.resume();
    assert_eq!(pending.await.unwrap().unwrap(), Value::Okay);
    assert_eq!(query(&mut con, &["GET", "k"]).await.unwrap(), bulk("v"));
}

#[tokio::test(start_paused = true)]
async fn a_flushed_script_cache_answers_noscript() {
    let node = node(NodeClock::default());
    let mut con = connect(&node).await;
    let sha = query(
        &mut con,
        &["SCRIPT", "LOAD", "return redis.call('SET', KEYS[1], ARGV[1])"],
    )
    .await
    .unwrap();
    let sha = redis::from_redis_value::<String>(sha).unwrap();
    assert_eq!(sha, super::sha1(b"return redis.call('SET', KEYS[1], ARGV[1])"));
    let reply = query(&mut con, &["EVALSHA", &sha, "1", "k", "v"]).await.unwrap();
    assert_eq!(reply, Value::Okay, "a status reply passes through the script");
    node.script_flush();
    let error = query(&mut con, &["EVALSHA", &sha, "1", "k", "v"])
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("NOSCRIPT"));
    assert_eq!(error.detail(), Some("No matching script. Please use EVAL."));
}

#[tokio::test(start_paused = true)]
async fn publications_reach_subscribers_on_other_connections() {
    let node = node(NodeClock::default());
    let mut pubsub = redis::aio::PubSub::new(&info(), stream(&node)).await.unwrap();
    pubsub.subscribe("quorumlock:wake:c1").await.unwrap();
    let mut con = connect(&node).await;
    let receivers = query(&mut con, &["PUBLISH", "quorumlock:wake:c1", "tok 1:c1:w"])
        .await
        .unwrap();
    assert_eq!(receivers, Value::Int(1));
    let message = pubsub.on_message().next().await.expect("a message");
    assert_eq!(message.get_channel_name(), "quorumlock:wake:c1");
    assert_eq!(message.get_payload_bytes(), b"tok 1:c1:w");
    let other = query(&mut con, &["PUBLISH", "elsewhere", "x"]).await.unwrap();
    assert_eq!(other, Value::Int(0));
}

#[tokio::test(start_paused = true)]
async fn wait_for_replicas_blocks_until_its_timeout() {
    let node = node(NodeClock::default());
    let mut con = connect(&node).await;
    assert_eq!(query(&mut con, &["WAIT", "0", "0"]).await.unwrap(), Value::Int(0));
    let start = Instant::now();
    assert_eq!(
        query(&mut con, &["WAIT", "1", "250"]).await.unwrap(),
        Value::Int(0)
    );
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn scripts_convert_values_as_redis_does() {
    let node = node(NodeClock::default());
    let mut con = connect(&node).await;
    let shared = con.clone();
    let eval = |src: &'static str| {
        let mut con = shared.clone();
        async move { query(&mut con, &["EVAL", src, "0"]).await }
    };
    let mixed = eval("return {1.9, -1.9, true, false, 'a', {ok='fine'}, nil, 3}")
        .await
        .unwrap();
    let expected = [
        Value::Int(1),
        Value::Int(-1),
        Value::Int(1),
        Value::Nil,
        bulk("a"),
    ];
    let Value::Array(items) = mixed else {
        panic!("an array")
    };
    assert_eq!(items[..5], expected);
    assert_eq!(items.len(), 6, "up to the first nil");
    // One generator per Lua state, from a fixed seed: the same numbers on
    // every run.
    let random = eval("return tostring(math.random())").await.unwrap();
    assert_eq!(random, bulk("0.17082803611217"));
    let raised = eval("return redis.call('INCR', 'z', 'y')").await.unwrap_err();
    assert!(
        raised
            .to_string()
            .contains("Wrong number of args calling Redis command from script")
    );
    let global = eval("x = 1").await.unwrap_err();
    assert!(
        global
            .to_string()
            .contains("user_script:1: Attempt to modify a readonly table"),
        "{global}"
    );
    query(&mut con, &["SET", "n", "1"]).await.unwrap();
    assert_eq!(
        eval("return redis.call('GET', 'n') + 1").await.unwrap(),
        Value::Int(2)
    );
}
