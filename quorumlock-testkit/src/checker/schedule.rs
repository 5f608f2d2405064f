//! The fault side of a scenario: its [`Schedule`] run step by step on a
//! blocking thread, recording what was applied.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Shared;
use crate::faults::{Cluster, Schedule, Step};

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
pub(super) fn run_schedule(
    mut cluster: Cluster,
    schedule: &Schedule,
    shared: &Shared,
    started: Instant,
) -> (Cluster, FaultLog) {
    let mut log = FaultLog::default();
    if !cluster.fakes.is_empty() {
        // A standing fault, in place from the start.
        log.faults += cluster.fakes.len();
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
                if action.is_fault() {
                    // It may take effect before `apply` returns.
                    shared.degraded.store(true, Ordering::SeqCst);
                }
                cluster.apply(action);
                shared.degraded.store(cluster.is_degraded(), Ordering::SeqCst);
                if action.is_fault() {
                    log.faults += 1;
                    if !log.kinds.contains(&action.kind()) {
                        log.kinds.push(action.kind());
                    }
                }
                log.lines.push(format!("+{:.3}s {action}", at.as_secs_f64()));
            }
        }
    }
    (cluster, log)
}
