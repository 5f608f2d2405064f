//! Fencing tokens: strictly increasing across holders (also across restarts
//! without persistence), and fenced writes that refuse a stale holder.

use std::time::Duration;

use quorumlock::{Error, Fenced, FencedWrite, Redlock, Setting};
use quorumlock_testkit::{RedisServer, builder, calls, client, eventually, get, set_foreign, start_nodes};
use redis::aio::MultiplexedConnection;

fn fenced(servers: &[RedisServer]) -> Redlock {
    builder(servers)
        .retry_delay(Duration::from_millis(20))
        .wait(Duration::from_secs(10))
        .options_fenced()
}

trait FencedBuilder {
    fn options_fenced(self) -> Redlock;
}

impl FencedBuilder for quorumlock::RedlockBuilder {
    fn options_fenced(self) -> Redlock {
        let redlock = self.build().unwrap();
        redlock.with_options(redlock.options().fenced(true)).unwrap()
    }
}

async fn store(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn tokens_strictly_increase_across_holders_and_restarts_without_persistence() {
    let mut servers = start_nodes(5);
    let clients: Vec<Redlock> = (0..4).map(|_| fenced(&servers)).collect();
    let mut last = 0u64;
    for i in 0..1000 {
        if i == 333 {
            // A minority comes back empty: its fences are gone.
            servers[0].restart();
            servers[3].restart();
        }
        if i == 666 {
            // Every node comes back empty: only the time floor is left.
            for server in &mut servers {
                server.restart();
            }
        }
        let guard = clients[i % clients.len()]
            .lock("sku:1", Duration::from_secs(5))
            .await
            .unwrap();
        let token = guard.fence_token().expect("fenced lock has a token");
        assert!(token > last, "acquisition {i}: token {token} after {last}");
        last = token;
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_plain_lock_has_no_fence_token() {
    let servers = start_nodes(1);
    let guard = client(&servers)
        .try_lock("plain", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence_token(), None);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_write_with_an_older_token_is_rejected_after_a_newer_holder_wrote() {
    let servers = start_nodes(3);
    let data = RedisServer::start();
    let mut conn = store(&data).await;
    // The first holder's lock runs out (no renewal) while it still works.
    let stale_client = fenced(&servers);
    let stale_client = stale_client
        .with_options(stale_client.options().auto_renew(false))
        .unwrap();
    let stale = stale_client
        .lock("order:9", Duration::from_secs(1))
        .await
        .unwrap();
    let old = stale.fence_token().unwrap();
    assert_eq!(
        FencedWrite::new("order:9", old)
            .set(&mut conn, "order:9:state", "paid")
            .await
            .unwrap(),
        Fenced::Applied(None),
        "the holder may write while no newer holder has"
    );
    stale.lost().await;

    let current = fenced(&servers)
        .lock("order:9", Duration::from_secs(5))
        .await
        .unwrap();
    let new = current.fence_token().unwrap();
    assert!(new > old);
    let write = FencedWrite::new("order:9", new);
    assert_eq!(
        write.set(&mut conn, "order:9:state", "shipped").await.unwrap(),
        Fenced::Applied(None)
    );
    // The same holder may write again.
    assert_eq!(
        write.set(&mut conn, "order:9:state", "delivered").await.unwrap(),
        Fenced::Applied(None)
    );

    let late = FencedWrite::new("order:9", old)
        .set(&mut conn, "order:9:state", "refunded")
        .await
        .unwrap();
    assert_eq!(late, Fenced::Stale { seen: new });
    assert_eq!(get(&data, "order:9:state").as_deref(), Some("delivered"));
    current.release().await.unwrap();
}

#[tokio::test]
async fn fenced_decrement_stops_at_its_minimum() {
    let data = RedisServer::start();
    let mut conn = store(&data).await;
    set_foreign(&data, "stock:7", "2", 60_000);
    let write = FencedWrite::new("sku:7", 10);
    assert_eq!(
        write.incr_by(&mut conn, "stock:7", -1, 0).await.unwrap(),
        Fenced::Applied(Some(1))
    );
    assert_eq!(
        write.incr_by(&mut conn, "stock:7", -1, 0).await.unwrap(),
        Fenced::Applied(Some(0))
    );
    assert_eq!(
        write.incr_by(&mut conn, "stock:7", -1, 0).await.unwrap(),
        Fenced::BelowMin { current: 0 }
    );
    assert_eq!(get(&data, "stock:7").as_deref(), Some("0"));
}

/// The known-unsafe case: the lock nodes restart empty while a holder works,
/// so a second holder gets the lock at the same time. Fencing keeps the
/// inventory consistent anyway: the newer holder's token is larger (time
/// floor), and the stale holder's deduction after it is refused.
#[tokio::test]
async fn overlapping_holders_after_restarts_without_persistence_cannot_oversell() {
    let mut servers = start_nodes(3);
    let data = RedisServer::start();
    let mut conn = store(&data).await;
    let stock = 5;
    set_foreign(&data, "stock:sku", &stock.to_string(), 600_000);

    let first = fenced(&servers)
        .lock("sku", Duration::from_secs(30))
        .await
        .unwrap();
    for server in &mut servers {
        server.restart();
    }
    let second = fenced(&servers)
        .lock("sku", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(first.is_held(), "the lock is violated: both believe they hold it");
    let (old, new) = (first.fence_token().unwrap(), second.fence_token().unwrap());
    assert!(new > old, "the time floor orders the tokens: {old} then {new}");

    // Each sells one unit; the newer holder writes first.
    let sold_new = FencedWrite::new("sku", new)
        .incr_by(&mut conn, "stock:sku", -1, 0)
        .await
        .unwrap();
    let sold_old = FencedWrite::new("sku", old)
        .incr_by(&mut conn, "stock:sku", -1, 0)
        .await
        .unwrap();
    assert_eq!(sold_new, Fenced::Applied(Some(stock - 1)));
    assert_eq!(
        sold_old,
        Fenced::Stale { seen: new },
        "the stale holder's write is refused"
    );
    let accepted = [sold_new, sold_old]
        .iter()
        .filter(|s| matches!(s, Fenced::Applied(_)))
        .count() as i64;
    let left: i64 = get(&data, "stock:sku").unwrap().parse().unwrap();
    assert_eq!(accepted + left, stock, "no unit sold twice");
    drop((first, second));
}

#[tokio::test]
async fn fenced_write_on_a_key_of_the_wrong_type_is_a_clear_error() {
    let data = RedisServer::start();
    let mut conn = store(&data).await;
    data.command(&["LPUSH", "stock:list", "1"]).unwrap();
    let write = FencedWrite::new("sku", 1);
    for result in [
        write.set(&mut conn, "stock:list", "3").await,
        write.incr_by(&mut conn, "stock:list", -1, 0).await,
    ] {
        match result {
            Err(Error::Config(error)) => {
                assert_eq!(error.setting(), Setting::FencedWrite, "{error}");
                assert!(error.message().contains("list"), "{error}");
            }
            other => panic!("expected a Config error, got {other:?}"),
        }
    }
    data.command(&["SET", "stock:text", "many"]).unwrap();
    match write.incr_by(&mut conn, "stock:text", -1, 0).await {
        Err(Error::Config(error)) => {
            assert_eq!(error.setting(), Setting::FencedWrite, "{error}");
            assert!(error.message().contains("integer"), "{error}");
        }
        other => panic!("expected a Config error, got {other:?}"),
    }
}

/// Scripts run on each node since `before`.
fn scripts_run(server: &RedisServer, before: u64) -> u64 {
    calls(server, "evalsha") - before
}

/// Acquires and releases `resource`; once every node ran all of it,
/// returns how many scripts each ran.
async fn fenced_cycle(servers: &[RedisServer], fenced: &Redlock, resource: &str) -> Vec<u64> {
    let before: Vec<u64> = servers.iter().map(|s| calls(s, "evalsha")).collect();
    let guard = fenced
        .try_lock(resource, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(guard.fence_token().is_some(), "fenced");
    guard.release().await.unwrap();
    // Each node runs the acquire (which sets the key: all are free), any
    // proposal, then the release, in that order on its connection: a node
    // that ran two scripts or more and has no key ran them all.
    eventually("every node ran the cycle", Duration::from_secs(5), || {
        servers
            .iter()
            .zip(&before)
            .all(|(s, &b)| scripts_run(s, b) >= 2 && get(s, resource).is_none())
    })
    .await;
    servers
        .iter()
        .zip(before)
        .map(|(s, b)| scripts_run(s, b))
        .collect()
}

#[tokio::test]
async fn a_fenced_acquisition_takes_its_token_with_the_grant_when_the_clocks_agree() {
    let servers = start_nodes(3);
    let fenced = fenced(&servers);
    // The first acquisition learns the nodes' clocks (and connects).
    fenced_cycle(&servers, &fenced, "cost").await;
    // The fenced acquire and the release on every node, no proposal round,
    // unless a request took longer than the lead over the clocks to arrive
    // (a loaded machine): then one more script per node.
    let mut one_round = 0;
    for _ in 0..20 {
        let ran = fenced_cycle(&servers, &fenced, "cost").await;
        assert!(ran.iter().all(|&n| n == 2 || n == 3), "scripts per node: {ran:?}");
        one_round += usize::from(ran.iter().all(|&n| n == 2));
    }
    assert!(one_round > 0, "no acquisition took its token with the grant");
}

/// Sets the fence of `resource` on every node far ahead of every clock, as
/// tokens of a client whose clock ran ahead could have left it: a proposal
/// made with a grant is below it. Returns that fence.
fn fences_ahead(servers: &[RedisServer], resource: &str) -> u64 {
    let ahead = 4_000_000_000_000_000u64;
    for server in servers {
        set_foreign(
            server,
            &format!("quorumlock:fence:{{{resource}}}"),
            &ahead.to_string(),
            60_000,
        );
    }
    ahead
}

#[tokio::test]
async fn a_proposal_below_a_fence_falls_back_to_a_proposal_round_above_it() {
    let servers = start_nodes(3);
    let ahead = fences_ahead(&servers, "sku");
    let fenced = fenced(&servers);
    let before: Vec<u64> = servers.iter().map(|s| calls(s, "evalsha")).collect();
    let guard = fenced
        .try_lock("sku", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        guard.fence_token(),
        Some(ahead + 1),
        "one above the highest fence"
    );
    guard.release().await.unwrap();
    eventually("every node ran three scripts", Duration::from_secs(5), || {
        servers.iter().zip(&before).all(|(s, &b)| scripts_run(s, b) >= 3)
    })
    .await;
    for (server, before) in servers.iter().zip(before) {
        assert_eq!(scripts_run(server, before), 3, "acquire, proposal, release");
    }
}

#[tokio::test]
async fn a_node_where_another_owner_holds_the_key_takes_no_proposal() {
    let servers = start_nodes(3);
    let ahead = fences_ahead(&servers, "sku");
    // Another owner's key on node 0 (a lock violated there, or a key the
    // earlier holder's release has yet to reach): our lock is granted by
    // the other two, and the proposal round must not raise node 0's fence,
    // which belongs to that owner's hold.
    set_foreign(&servers[0], "sku", "another-owner", 60_000);
    let fenced = fenced(&servers);
    let guard = fenced
        .try_lock("sku", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence_token(), Some(ahead + 1));
    eventually("the proposal reached every node", Duration::from_secs(5), || {
        servers[1..]
            .iter()
            .all(|s| get(s, "quorumlock:fence:{sku}") == Some((ahead + 1).to_string()))
    })
    .await;
    let proposals_done = |s: &RedisServer| calls(s, "evalsha") >= 2;
    eventually(
        "node 0 ran the acquire and the proposal",
        Duration::from_secs(5),
        || proposals_done(&servers[0]),
    )
    .await;
    assert_eq!(
        get(&servers[0], "quorumlock:fence:{sku}"),
        Some(ahead.to_string()),
        "the node of another owner kept its fence"
    );
    guard.release().await.unwrap();
}
