//! Coalesced acquires and releases: many concurrent requests share script
//! calls, each still gets its own outcome, and a failing node fails only its
//! own part.

use std::time::Duration;

use futures::future::join_all;
use quorumlock::Redlock;
use quorumlock_testkit::{
    Proxy, RedisServer, all_empty, builder, calls, client, dbsize, eventually, get, int, set_foreign,
    start_nodes, warm_up,
};

const TTL: Duration = Duration::from_secs(10);

/// Script calls `server` executed so far. (Command statistics count the
/// commands a script runs too, so top-level SETs cannot be told apart from
/// the SETs inside a batch; script calls can: scripts cannot call scripts.)
fn script_calls(server: &RedisServer) -> u64 {
    calls(server, "evalsha")
}

/// `tasks` tasks each lock and unlock `rounds` distinct keys at once;
/// returns the script calls each node executed.
async fn burst(redlock: &Redlock, servers: &[RedisServer], tasks: usize, rounds: usize) -> Vec<u64> {
    let before: Vec<u64> = servers.iter().map(script_calls).collect();
    let work = (0..tasks).map(|t| {
        let redlock = redlock.clone();
        async move {
            for r in 0..rounds {
                let guard = redlock
                    .try_lock(format!("item:{t}:{r}"), TTL)
                    .await
                    .expect("healthy nodes")
                    .expect("distinct keys are free");
                guard.release().await.expect("release");
            }
        }
    });
    join_all(work).await;
    // A release returns at a majority; the last node's deletes may still be
    // on their way.
    all_empty(servers, Duration::from_secs(5)).await;
    servers
        .iter()
        .zip(before)
        .map(|(s, b)| script_calls(s) - b)
        .collect()
}

#[tokio::test]
async fn concurrent_requests_on_distinct_keys_share_script_calls() {
    let servers = start_nodes(3);
    // A round trip of 2 ms, as on a network: requests gather while a batch
    // is on its way. (Over bare loopback the debug-built client, not the
    // node, is the bottleneck: a batch comes back before many requests have
    // gathered, and how many script calls a node sees depends on scheduling
    // more than on batching.)
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    for proxy in &proxies {
        proxy.set_latency(Duration::from_millis(1));
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let (tasks, rounds) = (200, 5);
    let requests = (tasks * rounds * 2) as u64;
    // Without batching every release is a script call of its own: one per
    // lock. With it, concurrent acquires and releases share script calls.
    let with = |batching| {
        Redlock::builder()
            .nodes(urls.clone())
            .node_timeout(Duration::from_secs(1))
            .batching(batching)
            .build()
            .unwrap()
    };
    let plain = burst(&with(false), &servers, tasks, rounds).await;
    let batched = burst(&with(true), &servers, tasks, rounds).await;
    println!("{requests} requests per node: script calls unbatched {plain:?}, batched {batched:?}");
    for (plain, batched) in plain.into_iter().zip(batched) {
        assert_eq!(plain, requests / 2, "unbatched: one release script per lock");
        // 32-44 script calls over 8 runs: 45-62 requests each.
        assert!(
            batched * 20 < requests,
            "{batched} script calls for {requests} requests: not batched"
        );
    }
}

#[tokio::test]
async fn each_request_of_a_mixed_batch_gets_its_own_outcome() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    for server in &servers {
        set_foreign(server, "taken:0", "other-owner", 30_000);
        set_foreign(server, "taken:1", "other-owner", 30_000);
        server.command(&["LPUSH", "a-list", "x"]).unwrap();
    }
    // Free keys, keys held by another owner, and a key of another type, all
    // at once so that they travel in shared batches.
    let names: Vec<String> = (0..60)
        .map(|i| match i % 6 {
            0 => format!("taken:{}", i % 2),
            3 => "a-list".to_string(),
            _ => format!("free:{i}"),
        })
        .collect();
    let attempts = names.iter().map(|name| redlock.try_lock(name.as_str(), TTL));
    let outcomes = join_all(attempts).await;
    let mut guards = Vec::new();
    for (name, outcome) in names.iter().zip(outcomes) {
        let guard = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
        if name.starts_with("free:") {
            guards.push(guard.unwrap_or_else(|| panic!("{name} is free")));
        } else {
            assert!(guard.is_none(), "{name} exists and must be refused");
        }
    }
    for server in &servers {
        assert_eq!(get(server, "taken:0").as_deref(), Some("other-owner"));
        assert_eq!(server.command(&["TYPE", "a-list"]).unwrap(), "+list\r\n");
    }
    join_all(guards.into_iter().map(|g| g.release())).await;
    // A release returns at a majority; the rest completes in the background.
    eventually(
        "only the other owners' keys are left",
        Duration::from_secs(5),
        || servers.iter().all(|s| dbsize(s) == 3),
    )
    .await;
    for server in &servers {
        assert_eq!(get(server, "taken:1").as_deref(), Some("other-owner"));
    }
}

#[tokio::test]
async fn a_node_killed_mid_batch_fails_only_its_part_and_leaks_nothing() {
    let mut servers = start_nodes(3);
    let redlock = client(&servers);
    warm_up(&redlock).await;
    let attempts = join_all((0..150).map(|i| redlock.try_lock(format!("burst:{i}"), TTL)));
    let kill = async {
        tokio::task::yield_now().await;
        servers[0].kill();
    };
    let (outcomes, ()) = tokio::join!(attempts, kill);
    // Two of three nodes still grant every lock.
    let guards: Vec<_> = outcomes
        .into_iter()
        .map(|o| o.expect("a majority is alive").expect("free key"))
        .collect();
    join_all(guards.into_iter().map(|g| g.release())).await;
    // No key leaked on the surviving nodes (the last deletes may still be on
    // their way when the releases return at a majority).
    all_empty(&servers[1..], Duration::from_secs(5)).await;
}

#[tokio::test]
async fn each_release_of_a_grouped_batch_gets_its_own_outcome() {
    let servers = start_nodes(3);
    // No renewal: the test changes the keys under the locks on purpose.
    let redlock = builder(&servers).auto_renew(false).build().unwrap();
    let names: Vec<String> = (0..80).map(|i| format!("held:{i}")).collect();
    let guards: Vec<_> = join_all(names.iter().map(|name| redlock.try_lock(name.as_str(), TTL)))
        .await
        .into_iter()
        .zip(&names)
        .map(|(outcome, name)| {
            outcome
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .expect("free key")
        })
        .collect();
    // Let every node hold every lock, then change what some of them hold:
    // another owner's token, nothing (expired), a key of another type.
    eventually("every node holds every lock", Duration::from_secs(5), || {
        servers.iter().all(|s| dbsize(s) == 80)
    })
    .await;
    for server in &servers {
        for (i, name) in names.iter().enumerate() {
            match i % 4 {
                1 => set_foreign(server, name, "other-owner", 30_000),
                2 => assert_eq!(int(server, &["DEL", name]), 1),
                3 => {
                    assert_eq!(int(server, &["DEL", name]), 1);
                    server.command(&["LPUSH", name, "x"]).unwrap();
                }
                _ => {}
            }
        }
    }
    let mgets: Vec<u64> = servers.iter().map(|s| calls(s, "mget")).collect();
    // All at once, so that they travel in shared batches.
    let reports = join_all(guards.into_iter().map(|g| g.release())).await;
    for (i, (name, report)) in names.iter().zip(reports).enumerate() {
        match (i % 4, report) {
            (0, Ok(report)) => assert!(
                report.deleted >= 2 && report.deleted == report.confirmed,
                "{name}: ours everywhere, deleted: {report:?}"
            ),
            (1 | 2, Ok(report)) => assert_eq!(
                (report.deleted, report.confirmed >= 2),
                (0, true),
                "{name}: not ours anywhere: {report:?}"
            ),
            (3, Err(quorumlock::Error::Unreachable { errors, .. })) => {
                assert!(errors.len() >= 2, "{name}: {errors:?}")
            }
            (_, outcome) => panic!("{name}: unexpected outcome {outcome:?}"),
        }
    }
    // The releases went through grouped batches (one MGET for the owner
    // checks of a batch), not one by one. (The releases returned at a
    // majority: the last node may still be running its batches.)
    for (server, before) in servers.iter().zip(mgets) {
        eventually(
            "a grouped batch ran on every node",
            Duration::from_secs(5),
            || calls(server, "mget") > before,
        )
        .await;
    }
    // Only the other owner's keys and the lists are left, untouched.
    eventually("only foreign keys are left", Duration::from_secs(5), || {
        servers.iter().all(|s| dbsize(s) == 40)
    })
    .await;
    for server in &servers {
        for (i, name) in names.iter().enumerate() {
            match i % 4 {
                1 => assert_eq!(get(server, name).as_deref(), Some("other-owner")),
                3 => assert_eq!(server.command(&["TYPE", name]).unwrap(), "+list\r\n"),
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn a_release_queued_behind_its_own_acquire_runs_after_it() {
    // The third node is slow: the two fast ones make every majority, so each
    // task releases while its acquire is still queued for the slow node, and
    // the two often travel in one batch. There the release must run after
    // the acquire, or it finds nothing to delete and the acquire then leaves
    // a key behind for the whole ttl.
    let servers = start_nodes(3);
    let proxy = Proxy::start(servers[2].port());
    let redlock = Redlock::builder()
        .nodes([servers[0].url(), servers[1].url(), proxy.url()])
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    // Counted before the warm-up: its SET there may still be on its way
    // when it returns (at a majority).
    let sets_before = calls(&servers[2], "set");
    warm_up(&redlock).await;
    proxy.set_latency(Duration::from_millis(20));
    let (tasks, rounds) = (40, 5);
    burst(&redlock, &servers, tasks, rounds).await;
    // Every acquire reached the slow node, and every release deleted its
    // key there (`burst`'s ttl of 10 s is far away; its own emptiness check
    // may pass before the slow node has run the last acquires). One more for
    // the warm-up.
    let acquires = (tasks * rounds) as u64 + 1;
    eventually("the slow node ran every acquire", Duration::from_secs(5), || {
        calls(&servers[2], "set") - sets_before >= acquires
    })
    .await;
    assert_eq!(calls(&servers[2], "set") - sets_before, acquires);
    all_empty(&servers, Duration::from_secs(5)).await;
}
