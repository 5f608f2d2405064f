//! Bounded work inside Redis: a node runs a script without serving anyone
//! else, so no call of ours may take long, whatever the data on the node. A
//! hand-off queue flooded with expired entries (waiters that died, or anyone
//! writing the queue key) must neither make a release a long script nor
//! keep a live waiter behind them from being named.

use std::time::Duration;

use futures::future::join_all;
use quorumlock::Redlock;
use quorumlock_testkit::{RedisServer, builder, client, eventually, get, int, start_nodes};
use redis::Value;
use tokio::time::Instant;

/// Expired entries flooded into a queue: popping them all in one script
/// takes a node far longer than [`SLOW_US`] (about 0.2 s on these machines).
const FLOOD: usize = 200_000;

/// What the node's slow log records (`slowlog-log-slower-than`, in µs): no
/// call of ours may take 10 ms.
const SLOW_US: i64 = 10_000;

/// The server time one release may take here, in µs. A bounded release
/// costs tens of µs, an unbounded one over the flooded queue about 0.2 s;
/// this leaves room for a node descheduled in the middle of the script on
/// a loaded machine (2.2 ms seen beside the rest of the suite), as the
/// batch's budget does. The entries removed are the exact measure of the
/// work; the time shows the node was never blocked by it.
const RELEASE_BUDGET_US: i64 = 5_000;

/// The server time one batch of a few dozen releases may take here, in µs:
/// each release in it pops at least its queue's head and examines a
/// bounded number of entries behind it (about 0.5 ms for the batch on
/// these machines); unbounded, the batches of the test take about 0.1 s.
const BATCH_BUDGET_US: i64 = 5_000;

/// Queue entries one release may remove: the library examines 16; anything
/// well below the flood is bounded.
const REMOVED_BOUND: i64 = 64;

/// Serializes the tests of this file: each floods a node, and on a machine
/// with two cores a flood running next to another test's measured release
/// would take the CPU from it (the slow log measures wall time).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Members are `<deadline in unix ms>:<client id>:<waiter id>`; a deadline
/// of 1 (1970) has passed for every clock.
fn expired_member(i: usize) -> String {
    format!("1:00:{i:x}")
}

/// Adds `count` expired entries (places 1..=count) to `queue` on `server`,
/// pipelined in chunks so that no single command is slow.
fn flood(server: &RedisServer, queue: &str, count: usize) {
    let mut conn = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    let mut pipe = redis::pipe();
    for chunk in (1..=count).collect::<Vec<_>>().chunks(1_000) {
        let cmd = pipe.cmd("ZADD").arg(queue);
        for &i in chunk {
            cmd.arg(i).arg(expired_member(i));
        }
        cmd.ignore();
    }
    let () = pipe.query(&mut conn).expect("flood the queue");
    assert_eq!(int(server, &["ZCARD", queue]), i64::try_from(count).unwrap());
}

/// Starts recording every command's server time in the slow log.
fn record_every_command(server: &RedisServer) {
    for args in [
        &["CONFIG", "SET", "slowlog-log-slower-than", "0"][..],
        &["CONFIG", "SET", "slowlog-max-len", "1024"],
        &["SLOWLOG", "RESET"],
    ] {
        let reply = server.command(args).expect("slow log");
        assert!(reply.starts_with("+OK"), "{args:?}: {reply:?}");
    }
}

/// One slow log entry: server time in µs and the command's arguments.
#[derive(Debug)]
struct Entry {
    micros: i64,
    args: Vec<String>,
}

fn slowlog(server: &RedisServer) -> Vec<Entry> {
    let mut conn = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .expect("connect");
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut conn)
        .expect("SLOWLOG GET");
    entries
        .into_iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                panic!("slow log entry {entry:?}");
            };
            let micros = match &fields[2] {
                Value::Int(us) => *us,
                other => panic!("slow log duration {other:?}"),
            };
            let args = match &fields[3] {
                Value::Array(args) => args
                    .iter()
                    .map(|a| match a {
                        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                        other => format!("{other:?}"),
                    })
                    .collect(),
                other => panic!("slow log arguments {other:?}"),
            };
            Entry { micros, args }
        })
        .collect()
}

/// Our script calls in the slow log: `EVALSHA sha numkeys keys...`.
fn script_calls(entries: &[Entry]) -> impl Iterator<Item = &Entry> {
    entries
        .iter()
        .filter(|e| e.args.first().is_some_and(|a| a.eq_ignore_ascii_case("evalsha")))
}

/// No command at all took [`SLOW_US`] or more.
fn assert_nothing_slow(entries: &[Entry]) {
    let slow: Vec<&Entry> = entries.iter().filter(|e| e.micros >= SLOW_US).collect();
    assert!(slow.is_empty(), "commands of {SLOW_US} µs or more: {slow:?}");
}

/// A release over a queue of 200,000 expired entries is one short script:
/// it examines a bounded part of the queue and leaves the rest to later
/// releases (or to the queue key's expiry).
#[tokio::test]
async fn a_release_examines_a_bounded_part_of_a_flooded_queue() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let servers = start_nodes(1);
    let server = &servers[0];
    let queue = "quorumlock:waiters:{flooded}";
    flood(server, queue, FLOOD);
    let redlock = client(&servers);
    let guard = redlock
        .try_lock("flooded", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    record_every_command(server);
    guard.release().await.unwrap();
    let entries = slowlog(server);
    assert_nothing_slow(&entries);
    let release = script_calls(&entries)
        .find(|e| e.args.get(3).is_some_and(|k| k == "flooded"))
        .unwrap_or_else(|| panic!("the release is not in the slow log: {entries:?}"));
    assert!(
        release.micros < RELEASE_BUDGET_US,
        "the release took {} µs on the node",
        release.micros
    );
    let removed = i64::try_from(FLOOD).unwrap() - int(server, &["ZCARD", queue]);
    assert!(
        (1..=REMOVED_BOUND).contains(&removed),
        "the release removed {removed} expired entries"
    );
    assert_eq!(get(server, "flooded"), None, "released");
}

/// Concurrent releases go out as batch script calls, each of which
/// announces up to hundreds of releases: their scans share one bound per
/// call, so a batch over flooded queues stays short.
#[tokio::test]
async fn batched_releases_over_flooded_queues_stay_short() {
    /// Concurrent releases: all but the first few go out in batches.
    const LOCKS: usize = 64;
    let _alone = ONE_AT_A_TIME.lock().await;
    let servers = start_nodes(1);
    let server = &servers[0];
    let resources: Vec<String> = (0..LOCKS).map(|i| format!("flooded-{i}")).collect();
    for resource in &resources {
        flood(
            server,
            &format!("quorumlock:waiters:{{{resource}}}"),
            FLOOD / LOCKS,
        );
    }
    let redlock = client(&servers);
    let guards = join_all(
        resources
            .iter()
            .map(|r| redlock.try_lock(r, Duration::from_secs(30))),
    )
    .await;
    let guards: Vec<_> = guards.into_iter().map(|g| g.unwrap().expect("free")).collect();
    record_every_command(server);
    for released in join_all(guards.into_iter().map(|g| g.release())).await {
        released.unwrap();
    }
    let entries = slowlog(server);
    assert_nothing_slow(&entries);
    // A batch lists every released key and its queue: numkeys > 2 (a lone
    // release has its key and its queue).
    let batches: Vec<&Entry> = script_calls(&entries)
        .filter(|e| {
            e.args
                .get(2)
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|n| n > 2)
        })
        .collect();
    assert!(!batches.is_empty(), "no batch among the releases: {entries:?}");
    for batch in batches {
        assert!(
            batch.micros < BATCH_BUDGET_US,
            "a batch with {} keys (each release's key and queue) took {} µs on the node",
            batch.args[2],
            batch.micros
        );
    }
    let left: i64 = resources
        .iter()
        .map(|r| int(server, &["ZCARD", &format!("quorumlock:waiters:{{{r}}}")]))
        .sum();
    let removed = i64::try_from(FLOOD / LOCKS * LOCKS).unwrap() - left;
    let lock_count = i64::try_from(LOCKS).unwrap();
    assert!(
        (lock_count..=lock_count * REMOVED_BOUND).contains(&removed),
        "{LOCKS} releases removed {removed} expired entries"
    );
    for resource in &resources {
        assert_eq!(get(server, resource), None, "{resource} released");
    }
}

/// A live waiter queued behind more expired entries than one release
/// examines is named by a later release, within a few: the expired entries
/// are cleared a bounded number per release.
#[tokio::test]
async fn a_live_waiter_behind_expired_entries_is_named_within_a_few_releases() {
    /// Expired entries ahead of the waiter: more than one release examines.
    const EXPIRED: usize = 40;
    /// Releases it may take to reach the waiter: 16 entries are examined per
    /// release, so the third names it.
    const RELEASES: usize = 5;
    let _alone = ONE_AT_A_TIME.lock().await;
    let servers = start_nodes(1);
    let server = &servers[0];
    let resource = "behind";
    let queue = format!("quorumlock:waiters:{{{resource}}}");
    flood(server, &queue, EXPIRED);
    let holder = client(&servers);
    let mut guard = holder
        .try_lock(resource, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    // Polls so slowly (at least 30 s apart) that only a release naming it
    // can give it the lock within the test.
    let waiting: Redlock = builder(&servers)
        .retry_delay(Duration::from_secs(60))
        .wait(Duration::from_secs(60))
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move { waiting.lock(resource, Duration::from_secs(30)).await });
    // The waiter's place is its start time in unix µs, far above the
    // flood's places.
    let live_queued = || int(server, &["ZCOUNT", &queue, &format!("({EXPIRED}"), "+inf"]);
    eventually(
        "the waiter queued behind the flood",
        Duration::from_secs(5),
        || live_queued() == 1,
    )
    .await;
    let mut releases = 0;
    loop {
        guard.release().await.unwrap();
        releases += 1;
        if live_queued() == 0 {
            break;
        }
        assert!(
            releases < RELEASES,
            "the waiter is still queued after {releases} releases; queue: {}",
            int(server, &["ZCARD", &queue])
        );
        guard = holder
            .try_lock(resource, Duration::from_secs(30))
            .await
            .unwrap()
            .expect("the waiter was not named, so it did not take the lock");
    }
    let named = Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the named waiter took the lock")
        .unwrap()
        .unwrap();
    assert!(
        named.elapsed() < Duration::from_secs(5),
        "woken by the release, not by its polling: {:?}",
        named.elapsed()
    );
    next.release().await.unwrap();
}
