//! Idempotency keys: an operation runs at most once per key, later callers
//! get its stored result, and failures (of the operation, of a caller, of
//! nodes) never make it run twice where the design says it must not.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Error, Idempotency, IdempotencyError, Redlock};
use quorumlock_testkit::{client, dbsize, get, pttl, start_nodes};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Marker ttl for operations that finish at once.
const TTL: Duration = Duration::from_secs(10);

/// An operation that counts its runs and returns `receipt-<run number>`, so a
/// second run would be visible in its result too.
async fn counted(runs: &AtomicUsize) -> Result<String, io::Error> {
    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("receipt-{n}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_callers_run_the_operation_once_and_share_its_result() {
    let servers = start_nodes(3);
    // Separate clients (separate connections), as separate processes would have.
    let clients: Vec<Redlock> = (0..5).map(|_| client(&servers)).collect();
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let idem = clients[i % clients.len()].idempotency();
            let runs = Arc::clone(&runs);
            tokio::spawn(async move {
                idem.run_string("idem:order:1", TTL, || async {
                    // Some work, so that the others arrive while it runs.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    counted(&runs).await
                })
                .await
            })
        })
        .collect();
    for task in tasks {
        let result = task.await.expect("caller task");
        assert_eq!(
            result.expect("every caller gets the result").as_str(),
            "receipt-1"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the operation ran exactly once");
}

#[tokio::test]
async fn no_wait_callers_get_in_progress_while_the_first_runs() {
    let servers = start_nodes(3);
    let (first, others) = (client(&servers), client(&servers));
    let runs = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = oneshot::channel();
    let (finish, finish_rx) = oneshot::channel::<()>();
    let running = {
        let runs = Arc::clone(&runs);
        tokio::spawn(async move {
            first
                .idempotency()
                .run_string("idem:upload:doc-500", TTL, || async move {
                    started_tx.send(()).unwrap();
                    finish_rx.await.unwrap();
                    counted(&runs).await
                })
                .await
        })
    };
    started.await.unwrap();
    let impatient = others.idempotency().no_wait();
    for _ in 0..5 {
        let result = impatient
            .run_string("idem:upload:doc-500", TTL, || counted(&runs))
            .await;
        match result {
            // The first caller's marker is on every node that answered its claim in time.
            Err(IdempotencyError::InProgress { pending, nodes: 3 }) if pending >= 2 => {}
            other => panic!("expected InProgress with markers on a majority of 3 nodes, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "only the first caller runs it");
    finish.send(()).unwrap();
    assert_eq!(running.await.unwrap().unwrap(), "receipt-1");
    let after = impatient
        .run_string("idem:upload:doc-500", TTL, || counted(&runs))
        .await;
    assert_eq!(
        after.unwrap(),
        "receipt-1",
        "once done, no-wait callers get the result"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_later_caller_gets_the_stored_result_without_running() {
    let servers = start_nodes(3);
    let runs = AtomicUsize::new(0);
    let result_ttl = Duration::from_secs(3600);
    let first = client(&servers).idempotency().result_ttl(result_ttl);
    let stored = first.run_string("idem:charge:42", TTL, || counted(&runs)).await;
    assert_eq!(stored.unwrap(), "receipt-1");
    for server in &servers {
        assert_eq!(get(server, "idem:charge:42").as_deref(), Some("done:receipt-1"));
        let left = pttl(server, "idem:charge:42");
        assert!(
            left > 3_500_000 && left <= 3_600_000,
            "kept for the result ttl: {left} ms"
        );
    }
    // Another process, with its own connections.
    let later = client(&servers).idempotency().no_wait();
    for _ in 0..3 {
        let again = later.run_string("idem:charge:42", TTL, || counted(&runs)).await;
        assert_eq!(again.unwrap(), "receipt-1");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "later callers did not run it");
}

/// The stored value says what it is, so no output can pass for a marker.
#[tokio::test]
async fn a_result_that_looks_like_a_marker_is_still_a_result() {
    let servers = start_nodes(1);
    let idem = client(&servers).idempotency().no_wait();
    let runs = AtomicUsize::new(0);
    let output = b"pending:0123456789abcdef0123456789abcdef".to_vec();
    for _ in 0..2 {
        let got = idem
            .run("idem:tricky", TTL, || async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, io::Error>(output.clone())
            })
            .await;
        assert_eq!(got.unwrap(), output);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        get(&servers[0], "idem:tricky").as_deref(),
        Some("done:pending:0123456789abcdef0123456789abcdef")
    );
}

#[tokio::test]
async fn a_crashed_first_caller_blocks_others_only_until_its_marker_expires() {
    let servers = start_nodes(3);
    let ttl = Duration::from_secs(1);
    let runs = Arc::new(AtomicUsize::new(0));
    let crashing = client(&servers).idempotency();
    let (started_tx, started) = oneshot::channel();
    let called = Instant::now();
    let crashed = {
        let runs = Arc::clone(&runs);
        tokio::spawn(async move {
            crashing
                .run_string("idem:cron:archive", ttl, || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    started_tx.send(()).unwrap();
                    std::future::pending::<Result<String, io::Error>>().await
                })
                .await
        })
    };
    started.await.unwrap();
    // The crash: the caller's future is dropped in the middle of the operation.
    crashed.abort();
    assert!(crashed.await.unwrap_err().is_cancelled());
    for server in &servers {
        let value = get(server, "idem:cron:archive").expect("the marker is left behind");
        assert!(value.starts_with("pending:"), "{value}");
    }

    let others = client(&servers).idempotency();
    let blocked = others
        .clone()
        .no_wait()
        .run_string("idem:cron:archive", ttl, || counted(&runs))
        .await;
    assert!(
        matches!(blocked, Err(IdempotencyError::InProgress { .. })),
        "{blocked:?}"
    );

    let ran_at = Mutex::new(None);
    let retried = others
        .wait(Duration::from_secs(10))
        .run_string("idem:cron:archive", ttl, || async {
            *ran_at.lock().unwrap() = Some(Instant::now());
            counted(&runs).await
        })
        .await;
    assert_eq!(retried.unwrap(), "receipt-2", "the operation ran again");
    let ran_at = ran_at.lock().unwrap().expect("ran");
    // The marker was set after `called`, so it expired after `called + ttl`
    // (by Redis's wall clock, in whole ms: allow a few ms of clock skew).
    assert!(
        ran_at + Duration::from_millis(10) >= called + ttl,
        "not before the marker expired: ran {:?} after the first call",
        ran_at - called
    );
    assert!(
        ran_at < called + ttl + Duration::from_secs(3),
        "soon after the marker expired: ran {:?} after the first call",
        ran_at - called
    );
}

#[tokio::test]
async fn a_failed_operation_is_not_cached_and_the_next_call_runs_it() {
    let servers = start_nodes(3);
    let idem = client(&servers).idempotency().no_wait();
    let runs = AtomicUsize::new(0);
    let failed = idem
        .run_string("idem:refund:9", TTL, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<String, _>(io::Error::other("card network down"))
        })
        .await;
    match failed {
        Err(IdempotencyError::OperationFailed(e)) => {
            assert_eq!(e.to_string(), "card network down");
            assert!(
                e.downcast_ref::<io::Error>().is_some(),
                "the operation's own error"
            );
        }
        other => panic!("expected OperationFailed, got {other:?}"),
    }
    for server in &servers {
        assert_eq!(dbsize(server), 0, "the marker was deleted at once");
    }
    let retried = idem.run_string("idem:refund:9", TTL, || counted(&runs)).await;
    assert_eq!(retried.unwrap(), "receipt-2");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the next call ran it");
}

#[tokio::test]
async fn with_cache_failures_the_next_call_gets_the_cached_failure() {
    let servers = start_nodes(3);
    let idem = client(&servers).idempotency().no_wait().cache_failures(true);
    let runs = AtomicUsize::new(0);
    let declined = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Err::<String, _>("card declined")
    };
    match idem.run_string("idem:charge:7", TTL, declined).await {
        Err(IdempotencyError::OperationFailed(e)) => assert_eq!(e.to_string(), "card declined"),
        other => panic!("expected OperationFailed, got {other:?}"),
    }
    for server in &servers {
        assert_eq!(
            get(server, "idem:charge:7").as_deref(),
            Some("failed:card declined")
        );
    }
    let later = client(&servers).idempotency().no_wait();
    for _ in 0..2 {
        match later.run_string("idem:charge:7", TTL, || counted(&runs)).await {
            Err(IdempotencyError::CachedFailure { message }) => assert_eq!(message, "card declined"),
            other => panic!("expected CachedFailure, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the failure was not run again");
}

#[tokio::test]
async fn one_of_three_nodes_killed_still_runs_once_and_serves_the_result() {
    let mut servers = start_nodes(3);
    servers[1].kill();
    let idem = client(&servers).idempotency().no_wait();
    let runs = AtomicUsize::new(0);
    for _ in 0..3 {
        let got = idem.run_string("idem:doc:1", TTL, || counted(&runs)).await;
        assert_eq!(got.expect("2 of 3 nodes are a majority"), "receipt-1");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    for i in [0, 2] {
        assert_eq!(get(&servers[i], "idem:doc:1").as_deref(), Some("done:receipt-1"));
    }
}

#[tokio::test]
async fn two_of_three_nodes_killed_fail_as_unreachable_without_running() {
    let mut servers = start_nodes(3);
    servers[0].kill();
    servers[2].kill();
    let redlock = client(&servers);
    let runs = AtomicUsize::new(0);
    // Whether it gives up at once or after a short wait, the operation never runs.
    for idem in [
        redlock.idempotency().no_wait(),
        redlock.idempotency().wait(Duration::from_millis(300)),
    ] {
        match idem.run_string("idem:doc:2", TTL, || counted(&runs)).await {
            Err(IdempotencyError::Lock(Error::Unreachable {
                succeeded: 1,
                refused: 0,
                quorum: 2,
                nodes: 3,
                errors,
            })) => assert_eq!(errors.len(), 2, "{errors:?}"),
            other => panic!("expected Unreachable with 1 of 3 nodes, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the operation did not run");
    assert_eq!(
        dbsize(&servers[1]),
        0,
        "the marker on the live node was taken back"
    );
}

/// Nodes die between the claim and the store: the first caller learns that
/// the result may be partially stored (and gets it), and a later caller that
/// reaches the one node holding it gets it instead of running the operation.
#[tokio::test]
async fn a_result_stored_on_a_minority_is_reported_and_never_rerun() {
    let servers = Mutex::new(start_nodes(3));
    let redlock = client(&servers.lock().unwrap());
    let runs = AtomicUsize::new(0);
    let partial = redlock
        .idempotency()
        .no_wait()
        .run_string("idem:transfer:5", TTL, || async {
            {
                let mut servers = servers.lock().unwrap();
                servers[1].kill();
                servers[2].kill();
            }
            counted(&runs).await
        })
        .await;
    match partial {
        Err(IdempotencyError::ResultNotStored {
            stored: 1,
            refused: 0,
            quorum: 2,
            nodes: 3,
            errors,
            output,
        }) => {
            assert_eq!(errors.len(), 2, "{errors:?}");
            assert_eq!(&output[..], b"receipt-1", "the error carries the result");
        }
        other => panic!("expected ResultNotStored on 1 of 3 nodes, got {other:?}"),
    }
    // The two nodes come back empty (no persistence): a majority without the
    // result, which a claim could take.
    let mut servers = servers.into_inner().unwrap();
    servers[1].restart();
    servers[2].restart();
    let later = client(&servers).idempotency().no_wait();
    let got = later.run_string("idem:transfer:5", TTL, || counted(&runs)).await;
    assert_eq!(got.unwrap(), "receipt-1", "a result on any node is final");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the operation did not run twice");
    for server in &servers[1..] {
        assert_eq!(dbsize(server), 0, "the reader took back its markers");
    }
}

#[tokio::test]
async fn bad_input_is_a_config_error_and_runs_nothing() {
    let servers = start_nodes(1);
    let redlock = client(&servers);
    let idem = redlock.idempotency();
    let runs = AtomicUsize::new(0);
    let cases: [(&Idempotency, &str, Duration); 4] = [
        (&idem, "", TTL),
        (&idem, "idem:x", Duration::ZERO),
        // Not larger than the per-node timeout (500 ms in tests).
        (&idem, "idem:x", Duration::from_millis(400)),
        (&idem.clone().result_ttl(Duration::ZERO), "idem:x", TTL),
    ];
    for (idem, key, ttl) in cases {
        match idem.run_string(key, ttl, || counted(&runs)).await {
            Err(IdempotencyError::Lock(Error::Config(_))) => {}
            other => panic!("key {key:?}, ttl {ttl:?}: expected Config, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(dbsize(&servers[0]), 0);
}

/// A key that holds data this module did not write (here a lock on the same
/// name) is a naming mistake to fix, not something to overwrite or wait for.
#[tokio::test]
async fn a_key_holding_other_data_is_a_config_error() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let guard = redlock.try_lock("report:daily", TTL).await.unwrap().unwrap();
    let runs = AtomicUsize::new(0);
    let result = redlock
        .idempotency()
        .run_string("report:daily", TTL, || counted(&runs))
        .await;
    assert!(
        matches!(result, Err(IdempotencyError::Lock(Error::Config(_)))),
        "{result:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    for server in &servers {
        assert_eq!(get(server, "report:daily").as_deref(), Some(guard.token()));
    }
    guard.release().await.unwrap();
}

#[test]
fn idempotency_and_its_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let redlock = Redlock::builder().node("redis://127.0.0.1:1").build().unwrap();
    let idem = redlock.idempotency();
    send_sync(&idem);
    let run = idem.run("k", TTL, || async { Ok::<_, io::Error>(Vec::new()) });
    send(&run);
    let run_string = idem.run_string("k", TTL, || async { Ok::<_, io::Error>(String::new()) });
    send(&run_string);
}

#[tokio::test]
async fn distinct_keys_run_independently() {
    let servers = start_nodes(3);
    let idem = client(&servers).idempotency();
    let runs: Vec<Arc<AtomicUsize>> = (0..4).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    // Four keys, each called three times concurrently: each operation runs
    // once, for its own key, and its callers get its own result.
    let calls = (0..12).map(|i| {
        let (idem, runs) = (idem.clone(), Arc::clone(&runs[i % 4]));
        async move {
            let key = format!("idem:distinct:{}", i % 4);
            let value = idem
                .run_string(&key, TTL, || async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, io::Error>(format!("result-{}", i % 4))
                })
                .await;
            (i % 4, value)
        }
    });
    for (key, value) in futures::future::join_all(calls).await {
        assert_eq!(value.unwrap(), format!("result-{key}"));
    }
    for (key, runs) in runs.iter().enumerate() {
        assert_eq!(runs.load(Ordering::SeqCst), 1, "key {key} ran once");
    }
}
