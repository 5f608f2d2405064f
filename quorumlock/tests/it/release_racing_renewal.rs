//! A release racing a renewal round of its lock: the round's heal must not
//! set the released key again, which would leave a key nobody owns for a
//! whole ttl.

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::{builder, get, start_nodes};

/// How often a released key is looked for until it is gone.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// Taken off the ttl before a key left over counts as set again: a node
/// counts expiry in whole milliseconds on its own clock, and a look takes a
/// few milliseconds under load.
const CLOCK_SLACK: Duration = Duration::from_millis(20);

/// Renewal heals (re-sets our key where it is missing). A release that
/// comes while a renewal round of its lock is being handed to the nodes must
/// not be followed by that round's heal: it would leave a key nobody owns,
/// for a whole ttl. Many locks are released at random times while a few
/// thousand others make each renewal round long, and no released key may
/// outlive the ttl that starts when its release is called.
///
/// Why that bound and no shorter one: the release returns once a majority
/// ran it, and under a loaded machine the last node may run its delete
/// hundreds of milliseconds later, so a key still there some time after the
/// release proves nothing. What does: every write a node ran before its
/// delete is deleted, and every write it ran after was set after the release
/// was called, so its key lives past that moment plus a ttl. A key that was
/// not set again is gone before then unless its node's delete comes later
/// still *and* a renewal reached that node within [`CLOCK_SLACK`] of the
/// release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_racing_renewals_leave_no_key() {
    const BACKGROUND: usize = 2000;
    const TASKS: usize = 32;
    let nodes = std::sync::Arc::new(start_nodes(3));
    let redlock: Redlock = builder(&nodes)
        .node_timeout(Duration::from_millis(150))
        .heal(true)
        .build()
        .expect("config");
    let ttl = Duration::from_millis(600);
    let background =
        futures::future::join_all((0..BACKGROUND).map(|i| redlock.lock(format!("background:{i}"), ttl)))
            .await;
    let run_until = tokio::time::Instant::now() + Duration::from_secs(2);
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (redlock, nodes) = (redlock.clone(), std::sync::Arc::clone(&nodes));
            tokio::spawn(async move {
                let mut healed = Vec::new();
                let (mut round, mut confirmed) = (0, 0);
                while tokio::time::Instant::now() < run_until {
                    round += 1;
                    let key = format!("race:{task}:{round}");
                    // Under this load a node may miss the 150 ms timeout:
                    // a lock not taken has nothing to release.
                    let Ok(guard) = redlock.lock(key.as_str(), ttl).await else {
                        continue;
                    };
                    let hold = Duration::from_millis(rand::random_range(0..400));
                    tokio::time::sleep(hold).await;
                    let token = guard.token().to_owned();
                    let released = tokio::time::Instant::now();
                    // A release no majority confirmed in time may leave its
                    // keys for their ttl, as documented: only confirmed
                    // releases are held to the bound below.
                    if guard.release().await.is_err() {
                        continue;
                    }
                    confirmed += 1;
                    loop {
                        let left: Vec<u16> = nodes
                            .iter()
                            .filter(|node| get(node, &key).as_deref() == Some(token.as_str()))
                            .map(|node| node.port())
                            .collect();
                        if left.is_empty() {
                            break;
                        }
                        if released.elapsed() >= ttl - CLOCK_SLACK {
                            healed.push(format!("{key} on ports {left:?}"));
                            break;
                        }
                        tokio::time::sleep(LOOK_EVERY).await;
                    }
                }
                (round, confirmed, healed)
            })
        })
        .collect();
    let (mut attempts, mut releases) = (0, 0);
    let mut healed = Vec::new();
    for task in tasks {
        let (rounds, confirmed, found) = task.await.expect("no panic");
        attempts += rounds;
        releases += confirmed;
        healed.extend(found);
    }
    // Most rounds must get as far as a confirmed release, or the race was
    // not run.
    assert!(
        releases * 2 > attempts,
        "only {releases} of {attempts} rounds released"
    );
    assert!(
        healed.is_empty(),
        "{} of {releases} released keys were set again: {healed:?}",
        healed.len()
    );
    // The load's locks (any that missed the timeout under this load were
    // not taken); a release of theirs that misses it leaves 600 ms keys.
    for guard in background.into_iter().flatten() {
        let _ = guard.release().await;
    }
}
