//! The operator tools against real nodes: an inspection reports what each
//! node's lock key holds (token, ttl, waiters, or the node's error) and a
//! majority verdict that is `Held` only for a token a majority holds, with
//! the validity that majority guarantees; `unlock` deletes only the given
//! token; `force_unlock` deletes whatever is there and says what it was.

use std::time::Duration;

use quorumlock::{DeletedValue, Error, KeyState, LockOptions, Redlock, UnlockOutcome, Verdict};
use quorumlock_testkit::{RedisServer, client, get, set_foreign, start_nodes};
use tokio::time::Instant;

const KEY: &str = "report:nightly";

fn hset(server: &RedisServer, key: &str) {
    let reply = server.command(&["HSET", key, "field", "value"]).expect("HSET");
    assert!(reply.starts_with(':'), "HSET: {reply:?}");
}

fn states(redlock_nodes: &quorumlock::Inspection) -> Vec<&KeyState> {
    redlock_nodes.nodes.iter().map(|n| &n.state).collect()
}

#[tokio::test]
async fn a_lock_held_by_this_client_is_held_on_every_node_with_its_token_and_ttl() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let ttl = Duration::from_secs(10);
    let guard = redlock.lock(KEY, ttl).await.expect("a free resource");
    let inspection = redlock.inspect(KEY).await.expect("inspect");
    assert_eq!(inspection.resource, KEY);
    assert_eq!(inspection.quorum, 2);
    assert_eq!(inspection.nodes.len(), 3);
    for (node, server) in inspection.nodes.iter().zip(&servers) {
        // The inspection follows the lock's SET on each node's connection.
        match &node.state {
            KeyState::Held { token, ttl: left } => {
                assert_eq!(token, guard.token());
                assert!(*left <= ttl && *left > Duration::from_secs(8), "{left:?}");
            }
            other => panic!("{}: {other:?}", node.node),
        }
        assert_eq!(node.waiters, Some(0));
        assert!(node.node.contains(&server.port().to_string()), "{}", node.node);
        assert!(
            !node.node.contains("redis://"),
            "a name, not a URL: {}",
            node.node
        );
    }
    match &inspection.verdict {
        Verdict::Held { token, valid_for, .. } => {
            assert_eq!(token, guard.token());
            assert!(
                *valid_for < ttl && *valid_for > Duration::from_secs(8),
                "{valid_for:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    guard.release().await.expect("release");
    let after = redlock.inspect(KEY).await.expect("inspect");
    assert_eq!(after.verdict, Verdict::Free);
    assert!(
        states(&after).iter().all(|s| matches!(s, KeyState::Free)),
        "{after:?}"
    );
}

/// The validity is that of the majority that lasts longest: with ttls of
/// 20 s, 6 s and 1 s, two of three nodes hold the token for 6 s, not 1 s
/// or 20 s.
#[tokio::test]
async fn the_validity_is_the_ttl_at_which_the_majority_ends_less_elapsed_and_drift() {
    let servers = start_nodes(3);
    for (server, ttl_ms) in servers.iter().zip([1_000, 20_000, 6_000]) {
        set_foreign(server, KEY, "another-library-token", ttl_ms);
    }
    let inspection = client(&servers).inspect(KEY).await.expect("inspect");
    let Verdict::Held { token, valid_for, .. } = inspection.verdict else {
        panic!("{inspection:?}");
    };
    assert_eq!(token, "another-library-token");
    // 6 s less the drift allowance (1 % + 2 ms = 62 ms) and the inspection's time.
    let most = Duration::from_millis(6_000 - 62) - inspection.elapsed;
    assert!(valid_for <= most, "{valid_for:?} > {most:?}");
    assert!(valid_for > Duration::from_millis(5_000), "{valid_for:?}");
}

#[tokio::test]
async fn a_majority_without_the_key_is_free_and_a_down_node_is_its_error() {
    let mut servers = start_nodes(3);
    servers[2].kill();
    let redlock = client(&servers);
    let inspection = redlock.inspect(KEY).await.expect("inspect");
    assert_eq!(inspection.verdict, Verdict::Free, "{inspection:?}");
    assert!(
        matches!(inspection.nodes[2].state, KeyState::Failed(_)),
        "{inspection:?}"
    );
    assert_eq!(inspection.nodes[2].waiters, None);

    // One node held, one free, one down: no majority either way.
    set_foreign(&servers[0], KEY, "tok", 10_000);
    let inspection = redlock.inspect(KEY).await.expect("inspect");
    assert_eq!(inspection.verdict, Verdict::Indeterminate, "{inspection:?}");
    assert!(matches!(&inspection.nodes[0].state, KeyState::Held { token, .. } if token == "tok"));
    assert!(matches!(inspection.nodes[1].state, KeyState::Free));
    assert!(matches!(inspection.nodes[2].state, KeyState::Failed(_)));
}

#[tokio::test]
async fn nodes_holding_different_tokens_are_indeterminate_and_each_token_is_shown() {
    let servers = start_nodes(3);
    for (server, token) in servers.iter().zip(["a", "b", "a"]) {
        set_foreign(server, KEY, token, 10_000);
    }
    let redlock = client(&servers);
    // Two of three agree: held by "a".
    let inspection = redlock.inspect(KEY).await.expect("inspect");
    assert!(
        matches!(&inspection.verdict, Verdict::Held { token, .. } if token == "a"),
        "{inspection:?}"
    );
    set_foreign(&servers[2], KEY, "c", 10_000);
    let inspection = redlock.inspect(KEY).await.expect("inspect");
    assert_eq!(inspection.verdict, Verdict::Indeterminate, "{inspection:?}");
    let tokens: Vec<&str> = inspection
        .nodes
        .iter()
        .map(|n| match &n.state {
            KeyState::Held { token, .. } => token.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(tokens, ["a", "b", "c"]);
}

#[tokio::test]
async fn a_key_of_another_type_or_without_a_ttl_is_no_lock() {
    let servers = start_nodes(3);
    for server in &servers {
        hset(server, KEY);
    }
    let redlock = client(&servers);
    let inspection = redlock.inspect(KEY).await.expect("inspect");
    assert_eq!(inspection.verdict, Verdict::Indeterminate);
    for state in states(&inspection) {
        assert!(
            matches!(state, KeyState::WrongType { kind, ttl: None } if kind == "hash"),
            "{state:?}"
        );
    }

    let plain = "config:flag";
    for server in &servers {
        let reply = server.command(&["SET", plain, "forever"]).expect("SET");
        assert!(reply.starts_with("+OK"), "{reply:?}");
    }
    let inspection = redlock.inspect(plain).await.expect("inspect");
    assert_eq!(
        inspection.verdict,
        Verdict::Indeterminate,
        "a string without a ttl is not held"
    );
    for state in states(&inspection) {
        assert!(
            matches!(state, KeyState::WithoutTtl { value } if value == "forever"),
            "{state:?}"
        );
    }
}

#[tokio::test]
async fn queued_waiters_are_counted_on_every_node() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let guard = redlock.lock(KEY, Duration::from_secs(10)).await.expect("lock");
    let waiting = redlock
        .with_options(LockOptions::new().wait(Duration::from_secs(30)))
        .expect("options");
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let waiting = waiting.clone();
            tokio::spawn(async move { waiting.lock(KEY, Duration::from_secs(10)).await })
        })
        .collect();
    // The waiters queue at their first attempt, at a time the test cannot know.
    let deadline = Instant::now() + Duration::from_secs(10);
    let counted = loop {
        let inspection = redlock.inspect(KEY).await.expect("inspect");
        let counts: Vec<Option<u64>> = inspection.nodes.iter().map(|n| n.waiters).collect();
        if counts == [Some(2); 3] || Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(counted, [Some(2); 3]);
    for waiter in waiters {
        waiter.abort();
    }
    drop(guard);
}

#[tokio::test]
async fn unlock_deletes_the_given_token_and_nothing_else() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    for server in &servers {
        set_foreign(server, KEY, "the-holders-token", 10_000);
    }
    let report = redlock.unlock(KEY, "not-the-token").await.expect("unlock");
    assert_eq!(report.deleted(), 0);
    assert_eq!(report.answered(), 3);
    assert!(
        report
            .nodes
            .iter()
            .all(|n| matches!(n.outcome, UnlockOutcome::NotHeld)),
        "{report:?}"
    );
    for server in &servers {
        assert_eq!(get(server, KEY).as_deref(), Some("the-holders-token"));
    }

    let report = redlock.unlock(KEY, "the-holders-token").await.expect("unlock");
    assert_eq!(report.deleted(), 3, "{report:?}");
    for node in &report.nodes {
        assert!(
            matches!(&node.outcome, UnlockOutcome::Deleted(DeletedValue::String(v)) if v == "the-holders-token"),
            "{node:?}"
        );
    }
    for server in &servers {
        assert_eq!(get(server, KEY), None);
    }
}

#[tokio::test]
async fn force_unlock_deletes_whatever_holds_the_key_and_reports_it() {
    let mut servers = start_nodes(4);
    set_foreign(&servers[0], KEY, "foreign", 10_000);
    let reply = servers[1].command(&["SET", KEY, "stuck"]).expect("SET");
    assert!(reply.starts_with("+OK"));
    hset(&servers[2], KEY);
    servers[3].kill();
    let redlock = client(&servers);
    let report = redlock.force_unlock(KEY).await.expect("force unlock");
    let outcomes: Vec<&UnlockOutcome> = report.nodes.iter().map(|n| &n.outcome).collect();
    assert!(matches!(outcomes[0], UnlockOutcome::Deleted(DeletedValue::String(v)) if v == "foreign"));
    assert!(matches!(outcomes[1], UnlockOutcome::Deleted(DeletedValue::String(v)) if v == "stuck"));
    assert!(matches!(outcomes[2], UnlockOutcome::Deleted(DeletedValue::Other { kind }) if kind == "hash"));
    assert!(
        matches!(outcomes[3], UnlockOutcome::Failed(_)),
        "{:?}",
        outcomes[3]
    );
    assert_eq!((report.deleted(), report.answered(), report.quorum), (3, 3, 3));
    for server in &servers[..3] {
        let reply = server.command(&["EXISTS", KEY]).expect("EXISTS");
        assert!(reply.starts_with(":0"), "{reply:?}");
    }
    let again = redlock.force_unlock(KEY).await.expect("force unlock");
    assert!(
        again.nodes[..3]
            .iter()
            .all(|n| matches!(n.outcome, UnlockOutcome::NotHeld)),
        "{again:?}"
    );
}

#[tokio::test]
async fn force_unlock_wakes_the_next_waiter() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    for server in &servers {
        set_foreign(server, KEY, "crashed-holder", 60_000);
    }
    // Polling every 20 s: only the wake-up can hand the lock over in time.
    let waiting = redlock
        .with_options(
            LockOptions::new()
                .wait(Duration::from_secs(30))
                .retry_delay(Duration::from_secs(20)),
        )
        .expect("options");
    let waiter = tokio::spawn(async move { waiting.lock(KEY, Duration::from_secs(10)).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while redlock
        .inspect(KEY)
        .await
        .expect("inspect")
        .nodes
        .iter()
        .any(|n| n.waiters != Some(1))
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    redlock.force_unlock(KEY).await.expect("force unlock");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken long before its next poll")
        .expect("task")
        .expect("the lock");
    assert!(started.elapsed() < Duration::from_secs(5));
    guard.release().await.expect("release");
}

#[tokio::test]
async fn names_no_lock_may_have_are_refused() {
    let servers = start_nodes(1);
    let redlock: Redlock = client(&servers);
    for name in ["", "quorumlock:waiters:{x}"] {
        assert!(
            matches!(redlock.inspect(name).await, Err(Error::Config(_))),
            "{name:?}"
        );
        assert!(
            matches!(redlock.unlock(name, "t").await, Err(Error::Config(_))),
            "{name:?}"
        );
        assert!(
            matches!(redlock.force_unlock(name).await, Err(Error::Config(_))),
            "{name:?}"
        );
    }
    assert!(matches!(redlock.unlock(KEY, "").await, Err(Error::Config(_))));
}
