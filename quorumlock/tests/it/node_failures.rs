//! Dead, frozen and slow nodes: a minority is tolerated, a majority is an
//! outage (not contention), no one waits past the per-node timeout, and no
//! attempt leaks a key.

use std::time::Duration;

use quorumlock::{Error, NodeErrorKind, Redlock};
use quorumlock_testkit::fake::{FakeNode, Misbehaviour};
use quorumlock_testkit::{
    Persistence, RedisServer, all_empty, builder, calls, client, dbsize, eventually, get, set_foreign,
    start_nodes, warm_up,
};
use tokio::time::Instant;

#[tokio::test]
async fn minority_of_nodes_killed_still_locks() {
    let mut servers = start_nodes(5);
    servers[0].kill();
    servers[3].kill();
    let redlock = client(&servers);
    let guard = redlock
        .try_lock("doc:7", Duration::from_secs(10))
        .await
        .expect("3 of 5 nodes are enough")
        .expect("free resource");
    for i in [1, 2, 4] {
        assert_eq!(get(&servers[i], "doc:7").as_deref(), Some(guard.token()));
    }
    let report = guard.release().await.expect("a majority confirms the release");
    assert_eq!((report.nodes, report.confirmed, report.deleted), (5, 3, 3));
}

#[tokio::test]
async fn majority_of_nodes_killed_fails_as_unreachable_not_held() {
    let mut servers = start_nodes(5);
    for i in [0, 2, 4] {
        servers[i].kill();
    }
    let redlock = client(&servers);
    match redlock.try_lock("doc:8", Duration::from_secs(10)).await {
        Err(Error::Unreachable {
            succeeded,
            refused: 0,
            quorum: 3,
            nodes: 5,
            errors,
        }) => {
            assert!(succeeded <= 2);
            assert!(errors.len() >= 3, "{errors:?}");
            for e in &errors {
                // A dead node refuses the connection: it fails at once
                // instead of running into the per-node timeout.
                assert!(matches!(e.kind, NodeErrorKind::Redis(_)), "{e}");
                assert!(e.node.starts_with("127.0.0.1:"), "{e}");
            }
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    eventually(
        "the surviving nodes were released",
        Duration::from_secs(5),
        || [1, 3].iter().all(|&i| dbsize(&servers[i]) == 0),
    )
    .await;
    // `lock` reports the outage too once its budget is spent.
    let waiting = builder(&servers).max_attempts(2).build().unwrap();
    let outcome = waiting.lock("doc:8", Duration::from_secs(10)).await;
    assert!(matches!(outcome, Err(Error::Unreachable { .. })), "{outcome:?}");
}

#[tokio::test]
async fn killed_node_that_restarts_takes_part_again() {
    let mut servers = start_nodes(3);
    let redlock = client(&servers);
    warm_up(&redlock).await;
    servers[1].kill();
    servers[2].kill();
    assert!(matches!(
        redlock.try_lock("r", Duration::from_secs(5)).await,
        Err(Error::Unreachable { .. })
    ));
    servers[1].restart();
    servers[2].restart();
    // The client reconnects on its own; within a few attempts all nodes grant.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(guard)) = redlock.try_lock("r", Duration::from_secs(5)).await {
            // try_lock returns at a majority: give the third SET its round trip.
            let token = guard.token().to_owned();
            let all_granted = || servers.iter().all(|s| get(s, "r").as_deref() == Some(&*token));
            let until = Instant::now() + Duration::from_millis(500);
            while !all_granted() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let granted_everywhere = all_granted();
            guard.release().await.unwrap();
            if granted_everywhere {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "restarted nodes never came back into the quorum"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn frozen_minority_does_not_slow_a_successful_acquisition() {
    let servers = start_nodes(3);
    let timeout = Duration::from_millis(800);
    let redlock = builder(&servers).node_timeout(timeout).build().unwrap();
    warm_up(&redlock).await;
    let paused = servers[2].pause();
    let started = Instant::now();
    let guard = redlock
        .try_lock("fast", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("2 of 3");
    assert!(
        started.elapsed() < timeout / 2,
        "early exit at quorum, not at the frozen node's timeout: {:?}",
        started.elapsed()
    );
    drop(paused);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn node_slower_than_the_timeout_does_not_stall_past_it() {
    let servers = start_nodes(3);
    let timeout = Duration::from_millis(400);
    let redlock = builder(&servers).node_timeout(timeout).build().unwrap();
    warm_up(&redlock).await;
    // One node refuses, one grants, one is frozen: the outcome hangs on the
    // frozen node until its timeout, and not a moment longer. One refusal
    // and one failure rule out a majority, the failure alone would not:
    // busy, naming the frozen node.
    set_foreign(&servers[0], "slow", "other-owner", 30_000);
    let _paused = servers[1].pause();
    let once = redlock.with_options(redlock.options().max_attempts(1)).unwrap();
    let started = Instant::now();
    let result = once.lock("slow", Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    match result {
        Err(Error::Held { errors, .. }) => {
            assert_eq!(errors.len(), 1);
            assert!(
                matches!(errors[0].kind, NodeErrorKind::Timeout(t) if t <= timeout),
                "{}",
                errors[0]
            );
        }
        other => panic!("expected busy with one timeout, got {other:?}"),
    }
    assert!(
        elapsed >= timeout,
        "the outcome needed the frozen node: {elapsed:?}"
    );
    assert!(
        elapsed < timeout * 2,
        "stalled past the per-node timeout: {elapsed:?}"
    );
}

/// The frozen node receives our SET and, behind it, our release: when it
/// wakes up it must run both, in that order, and keep no key.
#[tokio::test]
async fn failed_attempt_leaks_no_key_on_a_node_that_answers_late() {
    let servers = start_nodes(3);
    let redlock = builder(&servers)
        .node_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm_up(&redlock).await;
    set_foreign(&servers[0], "late", "other-owner", 30_000);
    let (sets, evals) = (calls(&servers[1], "set"), calls(&servers[1], "evalsha"));
    let paused = servers[1].pause();
    let granted_evals = calls(&servers[2], "evalsha");
    // Busy (one refusal, one timeout): nothing taken.
    assert!(
        redlock
            .try_lock("late", Duration::from_secs(30))
            .await
            .unwrap()
            .is_none()
    );
    paused.resume();
    // The attempt's budget ended at the frozen node's timeout, so the
    // releases were sent but not awaited: wait until both nodes ran them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while calls(&servers[1], "set") < sets + 1
        || calls(&servers[1], "evalsha") < evals + 1
        || calls(&servers[2], "evalsha") < granted_evals + 1
    {
        assert!(
            Instant::now() < deadline,
            "the queued SET and releases never ran: set {} -> {}, eval {} -> {}, granted eval {} -> {}",
            sets,
            calls(&servers[1], "set"),
            evals,
            calls(&servers[1], "evalsha"),
            granted_evals,
            calls(&servers[2], "evalsha")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dbsize(&servers[2]), 0, "the granting node was released");
    assert_eq!(
        dbsize(&servers[1]),
        0,
        "the late SET was undone by the release behind it"
    );
}

#[tokio::test]
async fn validity_used_up_is_reported_as_such_and_releases() {
    let servers = start_nodes(3);
    let ttl = Duration::from_secs(2);
    let redlock = builder(&servers)
        .node_timeout(Duration::from_secs(1))
        .min_validity(Duration::from_millis(1900))
        .build()
        .unwrap();
    warm_up(&redlock).await;
    // Two nodes answer only after 300 ms: a majority is reached, but too late
    // to leave the 1.9 s of validity the caller asked for.
    let frozen = [servers[0].pause(), servers[1].pause()];
    let thaw = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(frozen);
    });
    match redlock.try_lock("tight", ttl).await {
        Err(Error::ValidityUsedUp { elapsed, ttl: t, min }) => {
            assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
            assert_eq!((t, min), (ttl, Duration::from_millis(1900)));
        }
        other => panic!("expected ValidityUsedUp, got {other:?}"),
    }
    thaw.await.unwrap();
    // Keys of the too-late lock are released.
    all_empty(&servers, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn node_answering_set_with_an_integer_is_a_failed_node_not_a_grant() {
    // SET NX answers +OK or nil. A node that answers `:1` is not answering
    // this request (a connection out of step with its requests, or not Redis
    // at all) and has failed: counting its reply as a grant would let two
    // broken nodes and one real one make a majority.
    let real = RedisServer::start();
    let fakes = [
        FakeNode::start(Misbehaviour::Answer(b":1\r\n"), 1),
        FakeNode::start(Misbehaviour::Answer(b":1\r\n"), 2),
    ];
    let redlock = Redlock::builder()
        .nodes([real.url(), fakes[0].url(), fakes[1].url()])
        .build()
        .unwrap();
    match redlock.try_lock("wrong-type", Duration::from_secs(10)).await {
        Err(Error::Unreachable {
            succeeded, errors, ..
        }) => {
            assert!(succeeded <= 1, "only the real node can grant");
            assert_eq!(errors.len(), 2, "{errors:?}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    eventually(
        "the failed attempt released the real node",
        Duration::from_secs(5),
        || dbsize(&real) == 0,
    )
    .await;
}

#[tokio::test]
async fn node_answering_scripts_with_a_string_is_a_failed_node_not_a_grant() {
    // The lock's scripts return integers. The redis crate also reads the
    // bulk string "1" as the number 1, so without a type check a node that
    // answers `$1 1` to everything would grant multi-resource locks and
    // confirm extends and renewals.
    let real = RedisServer::start();
    let fakes = [
        FakeNode::start(Misbehaviour::Answer(b"$1\r\n1\r\n"), 1),
        FakeNode::start(Misbehaviour::Answer(b"$1\r\n1\r\n"), 2),
    ];
    let redlock = Redlock::builder()
        .nodes([real.url(), fakes[0].url(), fakes[1].url()])
        .build()
        .unwrap();
    match redlock
        .try_lock(["order:1", "stock:1"], Duration::from_secs(10))
        .await
    {
        Err(Error::Unreachable {
            succeeded, errors, ..
        }) => {
            assert!(succeeded <= 1, "only the real node can grant");
            assert_eq!(errors.len(), 2, "{errors:?}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    eventually(
        "the failed attempt released the real node",
        Duration::from_secs(5),
        || dbsize(&real) == 0,
    )
    .await;

    // Extend: a lock on two real nodes and one such fake; one real node now
    // holds another owner's token, so only the fake's "1" could make a
    // majority for the extend.
    let servers = start_nodes(2);
    let redlock = Redlock::builder()
        .nodes([servers[0].url(), servers[1].url(), fakes[0].url()])
        .auto_renew(false)
        .build()
        .unwrap();
    let mut guard = redlock
        .try_lock("doc:1", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("2 real nodes grant");
    set_foreign(&servers[1], "doc:1", "someone-else", 10_000);
    assert!(
        guard.extend(Duration::from_secs(10)).await.is_err(),
        "one real node and a string from a broken one are not a majority"
    );
}

#[tokio::test]
async fn node_refusing_writes_fails_with_the_servers_own_error() {
    // Out of memory under `noeviction`: Redis answers SET and EVAL with an
    // -OOM error, which the node error carries as the server sent it.
    let full = || {
        RedisServer::start_with(
            Persistence::None,
            &["--maxmemory", "1", "--maxmemory-policy", "noeviction"],
        )
    };
    let servers = [RedisServer::start(), full(), full()];
    let redlock = client(&servers);
    for resources in [vec!["doc:9"], vec!["doc:9", "doc:10"]] {
        match redlock.try_lock(resources, Duration::from_secs(10)).await {
            Err(Error::Unreachable { errors, .. }) => {
                assert_eq!(errors.len(), 2, "{errors:?}");
                for e in &errors {
                    assert!(e.to_string().contains("OOM"), "{e}");
                }
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
        eventually(
            "the failed attempt released the healthy node",
            Duration::from_secs(5),
            || dbsize(&servers[0]) == 0,
        )
        .await;
    }
}

/// Scripts are called by SHA1 and loaded on every new connection. A node
/// whose script cache was flushed under a live connection fails that one
/// script call (`NOSCRIPT`: it did not run), drops the connection, and is
/// back with its scripts loaded on the next request.
#[tokio::test]
async fn a_node_that_lost_its_scripts_gets_them_again_on_the_next_connection() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    warm_up(&redlock).await;
    assert_eq!(servers[0].command(&["SCRIPT", "FLUSH"]).unwrap(), "+OK\r\n");

    let first = redlock
        .try_lock("flushed:1", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let token = first.token().to_owned();
    eventually("node 0 granted the first lock", Duration::from_secs(5), || {
        get(&servers[0], "flushed:1").as_deref() == Some(&*token)
    })
    .await;
    first.release().await.expect("two nodes confirm");
    all_empty(&servers[1..], Duration::from_secs(5)).await;
    assert_eq!(
        get(&servers[0], "flushed:1").as_deref(),
        Some(&*token),
        "the release script was not known to node 0 and did not run there"
    );

    let second = redlock
        .try_lock("flushed:2", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let token = second.token().to_owned();
    eventually("node 0 granted the second lock", Duration::from_secs(5), || {
        get(&servers[0], "flushed:2").as_deref() == Some(&*token)
    })
    .await;
    second.release().await.unwrap();
    eventually(
        "node 0 ran the release: its scripts are loaded again",
        Duration::from_secs(5),
        || get(&servers[0], "flushed:2").is_none(),
    )
    .await;
}
