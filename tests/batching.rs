//! Coalesced acquires and releases: many concurrent requests share script
//! calls, each still gets its own outcome, and a failing node fails only its
//! own part.

mod support;

use std::time::Duration;

use futures::future::join_all;
use quorumlock::Redlock;
use support::*;

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
    let (tasks, rounds) = (200, 5);
    let requests = (tasks * rounds * 2) as u64;
    // Without batching every release is a script call of its own: one per
    // lock. With it, concurrent acquires and releases share script calls.
    let plain = burst(
        &builder(&servers).batching(false).build().unwrap(),
        &servers,
        tasks,
        rounds,
    )
    .await;
    let batched = burst(&client(&servers), &servers, tasks, rounds).await;
    println!("{requests} requests per node: script calls unbatched {plain:?}, batched {batched:?}");
    for (plain, batched) in plain.into_iter().zip(batched) {
        assert_eq!(plain, requests / 2, "unbatched: one release script per lock");
        assert!(
            batched * 4 < requests,
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
