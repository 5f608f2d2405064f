//! Giving a lock back: the owner-checked delete of its keys on every node,
//! or, before its minimum hold has passed, their owner-checked expiry at
//! the end of it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::report::ReleaseReport;
use crate::lock::state::Held;
use tracing::Instrument;
use tracing::field::Empty;

use crate::backend::redlock::quorum::{Quorum, Tally, Until};
use crate::backend::redlock::wire::lock::{Extend, Release};
use crate::error::Result;
use crate::tasks::BackgroundWork;

/// What a Redlock release achieved (`ok`: nodes whose keys were deleted,
/// or kept until `kept_until`), or the error when no majority answered.
pub(crate) fn report(tally: Tally, kept_until: Option<Instant>) -> Result<ReleaseReport> {
    let (deleted, kept) = match kept_until {
        Some(_) => (0, tally.ok),
        None => (tally.ok, 0),
    };
    let report = ReleaseReport {
        nodes: tally.nodes,
        confirmed: tally.ok + tally.refused,
        deleted,
        kept,
        kept_until,
    };
    if report.confirmed >= tally.quorum() {
        Ok(report)
    } else {
        Err(tally.unreachable())
    }
}

/// How long a release's fan-out waits for answers, and how long the
/// requests of nodes that have not answered by then are still driven.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadlines {
    /// Answers count until then.
    pub(crate) answer_by: Instant,
    /// Requests still pending go on in the background until then (never
    /// before `answer_by`).
    pub(crate) finish_by: Instant,
}

/// Sends `release` to every node, waiting for answers until `answer_by` or
/// the point `until` names. `ok` counts nodes where our token was deleted,
/// `refused` nodes where it was already gone.
///
/// A node that has not answered when this returns keeps its release going
/// in the background until `finish_by` (the lock's ttl, after which the key
/// has expired anyway), so that it still runs behind a late SET of ours
/// queued on that node. Nodes listed in `skip` (they refused our SET: it set
/// nothing there) are counted as refused without a request.
pub(crate) async fn release_all(
    quorum: &Quorum,
    release: Release,
    deadlines: Deadlines,
    until: Until,
    skip: &[usize],
) -> Tally {
    let release = Arc::new(release);
    let Deadlines { answer_by, finish_by } = deadlines;
    quorum
        .fan_out(answer_by, answer_by.max(finish_by), until, |i| {
            let (nodes, release) = (Arc::clone(&quorum.nodes), Arc::clone(&release));
            let skipped = skip.contains(&i);
            async move {
                if skipped {
                    return Ok(Ok(false));
                }
                Ok(Ok(nodes[i].release(&release).await? > 0))
            }
        })
        .await
}

/// Releases the held lock `held` on every node (see [`release_all`]), once
/// no renewal of it can follow the release on any node (see
/// [`Held::renewals_handed_over`]). The nodes have until `by` to answer, or
/// without it one node timeout from the moment the release is sent: the
/// wait for a renewal round in progress must not use up the nodes' time.
pub(crate) async fn release_held(quorum: &Quorum, held: &Held, by: Option<Instant>, until: Until) -> Tally {
    wait_for_renewals(quorum, held).await;
    let deadlines = Deadlines {
        answer_by: by.unwrap_or_else(|| quorum.deadline()),
        finish_by: Instant::now() + held.ttl(),
    };
    release_all(quorum, release_request(held), deadlines, until, &[]).await
}

/// The owner-checked delete of `held`'s keys on one node.
pub(crate) fn release_request(held: &Held) -> Release {
    Release::new(Arc::clone(held.resources.keys()), Arc::clone(&held.token))
}

/// How a lock was given back.
pub(crate) struct GivenBack {
    /// `ok`: nodes where our keys were deleted, or kept until `kept_until`;
    /// `refused`: nodes where our token was already gone.
    pub(crate) tally: Tally,
    /// Set when the lock's minimum hold had not passed: the keys were not
    /// deleted but set to expire at this instant.
    pub(crate) kept_until: Option<Instant>,
}

/// Gives `held` back: deletes its keys on every node (see [`release_held`]),
/// or, while its minimum hold ([`crate::LockOptions::min_hold`]) has not
/// passed, sets them, owner-checked, to expire when it does (see
/// [`keep_held`]). Answers are awaited until `by`, or else the node timeout
/// from the point where no renewal can follow any more.
pub(crate) async fn give_back(quorum: &Quorum, held: &Held, by: Option<Instant>, until: Until) -> GivenBack {
    let span = tracing::debug_span!(
        "quorumlock.release",
        resources = ?held.resources.names(),
        ok = Empty,
        failed = Empty,
        kept = Empty,
    );
    let given = async {
        if held.keep_until(Instant::now()).is_some() {
            return keep_held(quorum, held, by, until).await;
        }
        GivenBack {
            tally: release_held(quorum, held, by, until).await,
            kept_until: None,
        }
    }
    .instrument(span.clone())
    .await;
    span.record("ok", given.tally.ok);
    span.record("failed", given.tally.errors.len());
    span.record("kept", given.kept_until.is_some());
    given
}

/// Keeps the keys of `held` until its minimum hold has passed: once no
/// renewal of it can follow, sends every node an owner-checked `PEXPIRE` to
/// the time left until then, rounded up to whole milliseconds so that no key
/// expires early. A key that is no longer ours (expired, or another owner's)
/// is left alone. Should the minimum hold pass during the wait for a renewal
/// round, the keys are deleted instead.
async fn keep_held(quorum: &Quorum, held: &Held, by: Option<Instant>, until: Until) -> GivenBack {
    wait_for_renewals(quorum, held).await;
    let now = Instant::now();
    let deadline = by.unwrap_or_else(|| quorum.deadline());
    let Some(kept_until) = held.keep_until(now) else {
        return GivenBack {
            tally: release_held(quorum, held, Some(deadline), until).await,
            kept_until: None,
        };
    };
    let left = kept_until - now;
    let extend = Arc::new(Extend {
        keys: Arc::clone(held.resources.keys()),
        token: Arc::clone(&held.token),
        ttl_ms: crate::backend::redlock::wire::millis(left + Duration::from_nanos(999_999)),
    });
    // Nodes still to answer when this returns get their PEXPIRE all the
    // same, until the keys would have expired on their own.
    let finish_by = deadline.max(now + held.ttl()).max(kept_until);
    let tally = quorum
        .ask(&extend, deadline, finish_by, until, |kept| *kept)
        .await;
    GivenBack {
        tally,
        kept_until: Some(kept_until),
    }
}

/// Ends renewal of `held` and waits, bounded, until no renewal round of it
/// is still being handed to a node (see [`Held::renewals_handed_over`]): a
/// renewal arriving after the keep would set the full ttl again.
async fn wait_for_renewals(quorum: &Quorum, held: &Held) {
    // A round awaits its replies for at most the node timeout; twice that
    // covers a busy scheduler. A round that never ends was on a runtime
    // that shut down: its task is gone, and no renewal can follow anyway.
    let limit = quorum.node_timeout.saturating_mul(2);
    let handed_over = held.renewals_handed_over();
    // Polled once without a timer: no round is in progress nearly always.
    tokio::pin!(handed_over);
    if futures::poll!(handed_over.as_mut()).is_pending() {
        let _ = tokio::time::timeout(limit, handed_over).await;
    }
}

/// Gives `held` back in the background (a dropped guard, a lost lock, see
/// [`give_back`]), as tracked work that a shutdown waits for; never blocks.
/// Without a runtime nothing is sent and the keys expire with their ttl.
pub(crate) fn release_in_background(quorum: &Arc<Quorum>, held: &Arc<Held>) {
    let (task_quorum, held) = (Arc::clone(quorum), Arc::clone(held));
    quorum
        .tasks
        .spawn_if_running(BackgroundWork::Release, async move {
            give_back(&task_quorum, &held, None, Until::All).await;
        });
}
