//! The fault side of a scenario: its [`Schedule`] run step by step on a
//! blocking thread, recording what was applied.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Shared;
use crate::faults::{Schedule, Step, Target};

/// How long a schedule's `await_acquisition` waits before the scenario fails.
const AWAIT_LIMIT: Duration = Duration::from_secs(20);

/// What a schedule did.
#[derive(Debug, Default)]
pub(super) struct FaultLog {
    /// `+elapsed action` for every action applied.
    pub(super) lines: Vec<String>,
    /// Fault actions applied.
    pub(super) faults: usize,
    /// Kinds of fault actions, in order of first use.
    pub(super) kinds: Vec<&'static str>,
}

/// Runs `schedule` on a blocking thread; returns the cluster and the log.
pub(super) fn run_schedule<T: Target>(
    mut cluster: T,
    schedule: &Schedule<T::Action>,
    shared: &Shared,
    started: Instant,
) -> (T, FaultLog) {
    let mut log = FaultLog::default();
    if cluster.standing_faults() > 0 {
        // A standing fault, in place from the start.
        log.faults += cluster.standing_faults();
        log.kinds.push("fake node");
    }
    for step in &schedule.steps {
        match step {
            Step::Wait(duration) => std::thread::sleep(*duration),
            Step::AwaitAcquisition => {
                let before = shared.acquisitions.load(Ordering::SeqCst);
                let since = std::time::Instant::now();
                while shared.acquisitions.load(Ordering::SeqCst) == before {
                    assert!(
                        since.elapsed() < AWAIT_LIMIT,
                        "no contender acquired the lock within {AWAIT_LIMIT:?}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Step::Do(action) => {
                let at = started.elapsed();
                if T::is_fault(action) {
                    // It may take effect before `apply` returns.
                    shared.degraded.store(true, Ordering::SeqCst);
                }
                cluster.apply(action);
                shared.degraded.store(cluster.is_degraded(), Ordering::SeqCst);
                if T::is_fault(action) {
                    log.faults += 1;
                    if !log.kinds.contains(&T::kind(action)) {
                        log.kinds.push(T::kind(action));
                    }
                }
                log.lines.push(format!("+{:.3}s {action}", at.as_secs_f64()));
            }
        }
    }
    (cluster, log)
}
