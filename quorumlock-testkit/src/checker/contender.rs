//! The contenders: each attempts the lock, holds it in short steps while
//! `is_held` says yes, records the holding, and pauses, until told to stop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use quorumlock::{Error, Guard, Redlock};
use rand::RngExt;
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::report::Holding;
use super::{Plan, Shared};

/// What contenders counted: summed over all of them into the [`Report`].
///
/// [`Report`]: super::Report
#[derive(Debug, Default)]
pub(super) struct Stats {
    /// Lock attempts.
    pub(super) rounds: usize,
    /// Attempts refused because another owner held the lock.
    pub(super) contended: usize,
    /// Attempts that failed with an error, by kind.
    pub(super) errors: BTreeMap<&'static str, usize>,
    /// Releases that did not reach a majority.
    pub(super) release_failures: usize,
}

impl Stats {
    /// Adds another contender's counts to these.
    pub(super) fn add(&mut self, other: Stats) {
        self.rounds += other.rounds;
        self.contended += other.contended;
        self.release_failures += other.release_failures;
        for (kind, n) in other.errors {
            *self.errors.entry(kind).or_default() += n;
        }
    }
}

/// A duration drawn uniformly from `[min, max]` (`min` if the range is empty).
fn between(rng: &mut StdRng, (min, max): (Duration, Duration)) -> Duration {
    if max <= min {
        return min;
    }
    let span = u64::try_from((max - min).as_micros()).unwrap_or(u64::MAX);
    min + Duration::from_micros(rng.random_range(0..=span))
}

/// One contender: attempt, hold if granted, pause, until told to stop.
pub(super) async fn contend(
    id: usize,
    redlock: Redlock,
    with_lock: bool,
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    mut rng: StdRng,
) -> Stats {
    let mut stats = Stats::default();
    warm_up(id, &redlock, &plan, &shared, &mut rng).await;
    while !shared.stop.is_cancelled() && plan.max_rounds.is_none_or(|max| stats.rounds < max) {
        stats.rounds += 1;
        let outcome = if with_lock {
            let target = between(&mut rng, plan.hold);
            let work = async |guard: &Guard| hold_inside(id, guard, target, &plan, &shared).await;
            match redlock.with_lock(plan.resource.as_str(), plan.ttl, work).await {
                // A loss is in the history already (recorded when the
                // library dropped the work).
                Ok(()) | Err(Error::Lost { .. }) => Ok(()),
                Err(Error::Held { .. }) => {
                    stats.contended += 1;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            match redlock.try_lock(plan.resource.as_str(), plan.ttl).await {
                Ok(Some(guard)) => {
                    hold(id, guard, &plan, &shared, &mut rng, &mut stats).await;
                    Ok(())
                }
                Ok(None) => {
                    stats.contended += 1;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        };
        match outcome {
            Ok(()) => {}
            Err(e @ Error::Config(_)) => panic!("chaos contender misconfigured: {e}"),
            Err(e) => {
                let kind = match e {
                    Error::Unreachable { .. } => "unreachable",
                    Error::ValidityUsedUp { .. } => "validity used up",
                    _ => "other",
                };
                *stats.errors.entry(kind).or_default() += 1;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(between(&mut rng, plan.retry)) => {}
            () = shared.stop.cancelled() => {}
        }
    }
    stats
}

/// Takes and releases a lock on a resource of the contender's own for
/// `plan.warm_up`, pausing between attempts as when contending: the client
/// is then in use, as a long-running process's is.
async fn warm_up(id: usize, redlock: &Redlock, plan: &Plan, shared: &Shared, rng: &mut StdRng) {
    let resource = format!("{}:warm-up:{id}", plan.resource);
    let until = Instant::now() + plan.warm_up;
    while Instant::now() < until && !shared.stop.is_cancelled() {
        if let Ok(Some(guard)) = redlock.try_lock(resource.as_str(), plan.ttl).await {
            // A failed release leaves a key of this resource only, to expire.
            let _ = guard.release().await;
        }
        tokio::time::sleep(between(rng, plan.retry)).await;
    }
}

/// Records a holding when dropped: at the end of the work, or when
/// `with_lock` drops the work because the lock was lost.
struct Recorder<'a> {
    id: usize,
    guard: &'a Guard,
    shared: &'a Shared,
    enter: Instant,
    degraded: bool,
    completed: bool,
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        let stop = Instant::now();
        let holding = Holding {
            contender: self.id,
            enter: self.enter,
            stop,
            valid_until: self.guard.valid_until(),
            lost: !self.completed,
            degraded: self.degraded,
            fence: self.guard.fence_token(),
        };
        self.shared
            .history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(holding);
    }
}

/// The work inside `with_lock`: steps while `is_held`, for `target`. Stops
/// early if `is_held` turns false; the library drops it on a loss.
async fn hold_inside(id: usize, guard: &Guard, target: Duration, plan: &Plan, shared: &Shared) {
    let mut recorder = Recorder {
        id,
        guard,
        shared,
        enter: Instant::now(),
        degraded: shared.degraded.load(Ordering::SeqCst),
        completed: false,
    };
    shared.acquisitions.fetch_add(1, Ordering::SeqCst);
    loop {
        if !guard.is_held() {
            return; // not completed: recorded as a loss
        }
        let done = recorder.enter.elapsed();
        if done >= target {
            break;
        }
        tokio::time::sleep(plan.step.min(target - done)).await;
    }
    recorder.completed = true;
}

/// The critical section: steps while `is_held`, stopping at once on a loss.
async fn hold(id: usize, guard: Guard, plan: &Plan, shared: &Shared, rng: &mut StdRng, stats: &mut Stats) {
    let enter = Instant::now();
    let degraded = shared.degraded.load(Ordering::SeqCst);
    shared.acquisitions.fetch_add(1, Ordering::SeqCst);
    let target = between(rng, plan.hold);
    let mut lost = false;
    loop {
        if !guard.is_held() {
            lost = true;
            break;
        }
        let done = enter.elapsed();
        if done >= target {
            break;
        }
        // One step of work, taken while the lock is held.
        tokio::select! {
            biased;
            () = guard.lost() => {
                lost = true;
                break;
            }
            () = tokio::time::sleep(plan.step.min(target - done)) => {}
        }
    }
    let stop = Instant::now();
    let valid_until = guard.valid_until();
    shared.history.lock().unwrap().push(Holding {
        contender: id,
        enter,
        stop,
        valid_until,
        lost,
        degraded,
        fence: guard.fence_token(),
    });
    if lost {
        // As `with_lock` does: the drop releases our token in the background.
        drop(guard);
    } else if guard.release().await.is_err() {
        stats.release_failures += 1;
    }
}
