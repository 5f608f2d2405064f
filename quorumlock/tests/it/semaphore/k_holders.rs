//! At most K holders at any instant: contenders, each with its own client,
//! take and release permits of one semaphore while one node of three
//! crashes (restarting from its AOF), pauses or drops off the network.
//!
//! Every holder records when it got its permit (`enter`) and when it stopped
//! working or its validity ended, whichever came first (`leave`), as the
//! chaos checker records lock holdings (`quorumlock_testkit::checker`): a
//! holder takes a step only after `is_held` and stops at the loss signal.
//! The history is then swept for the most holdings inside at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::{Error, Redlock};
use quorumlock_testkit::Persistence;
use quorumlock_testkit::faults::{Action, Cluster};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const K: usize = 3;
const CONTENDERS: usize = 8;
const NODES: usize = 3;
const TTL: Duration = Duration::from_millis(1500);

/// One holding of a permit.
#[derive(Clone, Debug)]
struct Holding {
    index: usize,
    enter: Instant,
    leave: Instant,
}

/// The most holdings whose `[enter, leave)` contain one instant. A holding
/// that leaves at the instant another enters does not overlap it.
fn most_at_once(history: &[Holding]) -> usize {
    let mut events: Vec<(Instant, i32)> = history
        .iter()
        .flat_map(|h| [(h.enter, 1), (h.leave, -1)])
        .collect();
    // -1 sorts before +1 at the same instant.
    events.sort();
    let (mut inside, mut most) = (0, 0);
    for (_, step) in events {
        inside += step;
        most = most.max(inside);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Pairs of holdings of the same permit that overlap (a lock violation).
fn same_permit_overlaps(history: &[Holding]) -> usize {
    let mut n = 0;
    for (i, a) in history.iter().enumerate() {
        for b in &history[i + 1..] {
            n += usize::from(a.index == b.index && a.enter < b.leave && b.enter < a.leave);
        }
    }
    n
}

#[test]
fn the_count_finds_the_most_holders_at_once() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let h = |index, enter, leave| Holding {
        index,
        enter: at(enter),
        leave: at(leave),
    };
    // Three inside during [20, 30); the fourth enters as the first leaves.
    let history = [h(0, 0, 30), h(1, 10, 40), h(2, 20, 50), h(0, 30, 60)];
    assert_eq!(most_at_once(&history), 3);
    assert_eq!(same_permit_overlaps(&history), 0);
    let history = [h(0, 0, 30), h(1, 10, 40), h(2, 20, 50), h(0, 29, 60)];
    assert_eq!(most_at_once(&history), 4);
    assert_eq!(same_permit_overlaps(&history), 1);
}

/// Holds permits until `stop`, recording each holding; returns how many
/// acquisitions failed (waits that ran out during faults).
async fn contend(redlock: Redlock, history: Arc<Mutex<Vec<Holding>>>, stop: CancellationToken) -> usize {
    let pool = redlock.semaphore("chaos-pool", K).unwrap();
    let mut failed = 0;
    let mut round: u64 = 0;
    while !stop.is_cancelled() {
        round += 1;
        let permit = match pool.acquire(TTL).await {
            Ok(permit) => permit,
            Err(Error::Config(e)) => panic!("{e}"),
            Err(_) => {
                failed += 1;
                continue;
            }
        };
        let enter = Instant::now();
        // Mostly short holds; every fifth outlives a renewal or two.
        let hold = if round.is_multiple_of(5) {
            700
        } else {
            5 + rand::random_range(0..40)
        };
        let done = enter + Duration::from_millis(hold);
        while Instant::now() < done && permit.is_held() {
            let step = (Instant::now() + Duration::from_millis(10)).min(done);
            tokio::select! {
                () = tokio::time::sleep_until(step) => {}
                () = permit.lost() => break,
            }
        }
        let leave = Instant::now().min(permit.valid_until());
        history.lock().unwrap().push(Holding {
            index: permit.index(),
            enter,
            leave,
        });
        let _ = permit.release().await;
        tokio::time::sleep(Duration::from_millis(rand::random_range(0..10))).await;
    }
    failed
}

/// Crashes (restarting from the AOF), pauses and partitions of one node at
/// a time, each for a while, with healthy gaps between: the delay before
/// each action, and the action.
fn minority_faults() -> Vec<(Duration, Action)> {
    let ms = Duration::from_millis;
    let mut schedule = Vec::new();
    for cycle in 0..2 {
        let node = vec![(cycle + 1) % NODES];
        schedule.extend([
            (ms(300), Action::Kill(node.clone())),
            (ms(800), Action::Start(node.clone())),
            (ms(300), Action::Pause(node.clone())),
            (ms(800), Action::Resume(node.clone())),
            (ms(300), Action::BlackHole(node.clone())),
            (ms(800), Action::Heal(node.clone())),
        ]);
    }
    schedule
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_k_holders_at_any_instant_under_minority_faults() {
    let cluster = Cluster::start(NODES, Persistence::AofAlways).with_proxies();
    let urls = cluster.urls();
    let history = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let mut contenders = Vec::new();
    for _ in 0..CONTENDERS {
        let redlock = Redlock::builder()
            .nodes(urls.clone())
            .node_timeout(Duration::from_millis(50))
            .build()
            .unwrap();
        let options = redlock
            .options()
            .wait(Duration::from_secs(3))
            .retry_delay(Duration::from_millis(100));
        let redlock = redlock.with_options(options).unwrap();
        contenders.push(tokio::spawn(contend(redlock, Arc::clone(&history), stop.clone())));
    }
    let faults = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        for (after, action) in minority_faults() {
            std::thread::sleep(after);
            cluster.apply(&action);
        }
        // Healthy again for a while: holders that saw a fault finish.
        std::thread::sleep(Duration::from_millis(500));
        cluster
    });
    let cluster = faults.await.unwrap();
    stop.cancel();
    let mut failed = 0;
    for contender in contenders {
        failed += contender.await.unwrap();
    }
    drop(cluster);

    let history = history.lock().unwrap().clone();
    let most = most_at_once(&history);
    println!(
        "semaphore K={K}, {CONTENDERS} contenders: {} holdings, at most {most} at once, {failed} waits ran out",
        history.len()
    );
    assert!(most <= K, "{most} holders at once with {K} permits");
    let mut per_permit = [0; K];
    for h in &history {
        per_permit[h.index] += 1;
    }
    assert_eq!(same_permit_overlaps(&history), 0);
    // Live: the permits kept changing hands, every one of them.
    assert!(history.len() >= 50, "only {} holdings", history.len());
    assert!(per_permit.iter().all(|&n| n > 0));
}
