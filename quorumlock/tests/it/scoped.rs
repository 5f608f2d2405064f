//! `try_with_lock`: the scoped lock that does not wait. It skips the work
//! while another owner holds the resource, and otherwise gives the same
//! guarantees as `with_lock` (renewed while the work runs, the work dropped
//! on a loss, released at the end and on cancellation).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::{RedisServer, all_empty, builder, get, start_nodes};
use tokio::time::Instant;

fn client(servers: &[RedisServer]) -> Redlock {
    builder(servers)
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_busy_resource_skips_the_work_without_waiting() {
    let servers = start_nodes(3);
    let (holder, other) = (client(&servers), client(&servers));
    let guard = holder
        .try_lock("report", Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    // On a loaded machine the holder may have won with a bare majority, a
    // node's SET still on its way or timed out: what must stay is what it had.
    let held_before: Vec<bool> = servers
        .iter()
        .map(|server| get(server, "report").as_deref() == Some(guard.token()))
        .collect();
    let ran = AtomicBool::new(false);
    let started = Instant::now();
    let outcome = other
        .try_with_lock("report", Duration::from_secs(10), async |_guard| {
            ran.store(true, Ordering::SeqCst);
        })
        .await
        .unwrap();
    assert!(outcome.is_none());
    assert!(
        !ran.load(Ordering::SeqCst),
        "the work ran while another owner held the lock"
    );
    // One attempt, not the client's 10 s wait.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        started.elapsed()
    );
    assert!(
        held_before.iter().filter(|held| **held).count() >= 2,
        "the holder has a majority"
    );
    for (server, held) in servers.iter().zip(held_before) {
        if held {
            assert_eq!(
                get(server, "report").as_deref(),
                Some(guard.token()),
                "the holder's keys stay"
            );
        }
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_free_resource_runs_the_work_holding_the_lock_and_releases_it() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let value = redlock
        .try_with_lock("report", Duration::from_secs(10), async |guard| {
            assert!(guard.is_held());
            // Granted by a majority; the last node's SET may still be on its way.
            let holding = servers
                .iter()
                .filter(|server| get(server, "report").as_deref() == Some(guard.token()))
                .count();
            assert!(holding >= 2, "our token on {holding} of 3 nodes");
            7
        })
        .await
        .unwrap();
    assert_eq!(value, Some(7));
    all_empty(&servers, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn the_work_is_renewed_past_its_ttl() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let ttl = Duration::from_secs(1);
    let held_throughout = redlock
        .try_with_lock("long", ttl, async |guard| {
            let started = Instant::now();
            while started.elapsed() < ttl * 2 {
                if !guard.is_held() {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            true
        })
        .await
        .unwrap();
    assert_eq!(held_throughout, Some(true));
}

#[tokio::test]
async fn a_loss_drops_the_work_and_is_an_error() {
    let mut servers = start_nodes(3);
    let redlock = client(&servers);
    let ticks = Arc::new(AtomicUsize::new(0));
    let work = {
        let ticks = Arc::clone(&ticks);
        redlock.try_with_lock("doomed", Duration::from_secs(1), async move |_guard| {
            loop {
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let fault = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        servers[0].kill();
        servers[1].kill();
    };
    let (outcome, ()) = tokio::join!(work, fault);
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    let frozen = ticks.load(Ordering::SeqCst);
    assert!(frozen > 0, "the work ran");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        ticks.load(Ordering::SeqCst),
        frozen,
        "the work kept running after the loss"
    );
}

#[tokio::test]
async fn a_cancelled_scope_releases_the_lock() {
    let servers = start_nodes(3);
    let redlock = client(&servers);
    let entered = tokio::sync::Notify::new();
    let scope = redlock.try_with_lock("cancelled", Duration::from_secs(30), async |_guard| {
        entered.notify_one();
        std::future::pending::<()>().await;
    });
    tokio::select! {
        outcome = scope => panic!("the scope ended by itself: {outcome:?}"),
        () = entered.notified() => {}
    }
    // The scope's future was dropped inside the work: its guard's drop
    // releases in the background, long before the 30 s ttl.
    all_empty(&servers, Duration::from_secs(5)).await;
}
