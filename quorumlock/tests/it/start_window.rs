//! `with_lock` and `try_with_lock` never start the work on a lock whose
//! validity ran out (or nearly) between taking the lock and the work's first
//! poll: the thread held up right after the acquisition (a tracing event of
//! the library that blocks, see `quorumlock_testkit::stall::StallOnEvent`),
//! against real redis-server nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::stall::StallOnEvent;
use quorumlock_testkit::{RedisServer, all_empty, builder, start_nodes};

const TTL: Duration = Duration::from_secs(1);
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

fn client(servers: &[RedisServer], node_timeout: Duration) -> Redlock {
    builder(servers).node_timeout(node_timeout).build().unwrap()
}

/// Runs `with_lock` (or `try_with_lock`) with the thread held up for
/// `stall` right after the acquisition; returns the outcome and whether the
/// work ran.
async fn held_up(redlock: &Redlock, ttl: Duration, stall: Duration, scoped_try: bool) -> (Result<()>, bool) {
    let resource = "start";
    let stall = Arc::new(StallOnEvent::new("lock acquired", stall));
    let ran = AtomicBool::new(false);
    let outcome = {
        let _default = tracing::subscriber::set_default(Arc::clone(&stall));
        let work = async |_: &quorumlock::Guard| ran.store(true, Ordering::SeqCst);
        if scoped_try {
            redlock
                .try_with_lock(resource, ttl, work)
                .await
                .map(|ran| assert!(ran.is_some(), "the resource was free"))
        } else {
            redlock.with_lock(resource, ttl, work).await
        }
    };
    assert!(stall.stalled(), "the acquisition emitted its event");
    (outcome, ran.load(Ordering::SeqCst))
}

type Result<T> = std::result::Result<T, Error>;

#[tokio::test]
async fn work_never_starts_once_the_validity_passed_and_the_loss_is_returned() {
    let servers = start_nodes(3);
    let redlock = client(&servers, NODE_TIMEOUT);
    for scoped_try in [false, true] {
        let (outcome, ran) = held_up(&redlock, TTL, TTL + TTL / 4, scoped_try).await;
        assert!(
            !ran,
            "the work started on a lapsed lock (try_with_lock: {scoped_try})"
        );
        assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    }
}

#[tokio::test]
async fn work_never_starts_with_less_validity_than_a_renewal_needs_and_the_lock_is_given_back() {
    let servers = start_nodes(3);
    // A slow network: a renewal round may take 1.5 s. Held up for 2 s of
    // the 3 s lock, about 1 s of validity is left: less than that round and
    // the start margin, though the keys live on for as long.
    let (ttl, node_timeout) = (Duration::from_secs(3), Duration::from_millis(1500));
    let redlock = client(&servers, node_timeout);
    let (outcome, ran) = held_up(&redlock, ttl, Duration::from_secs(2), false).await;
    assert!(!ran, "the work started with too little validity left");
    assert!(
        matches!(outcome, Err(Error::ValidityUsedUp { min, .. }) if min == node_timeout + quorumlock::START_MARGIN),
        "{outcome:?}"
    );
    // Released, long before the keys' remaining second runs out.
    all_empty(&servers, Duration::from_millis(300)).await;
}

#[tokio::test]
async fn a_short_hold_up_still_runs_the_work() {
    let servers = start_nodes(3);
    let redlock = client(&servers, NODE_TIMEOUT);
    let (outcome, ran) = held_up(&redlock, TTL, Duration::from_millis(100), false).await;
    assert!(outcome.is_ok() && ran, "{outcome:?}, ran: {ran}");
}
