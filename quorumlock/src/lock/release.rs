//! Giving a lock back: the owner-checked delete of its keys on every node.

use std::sync::Arc;

use tokio::time::Instant;

use super::state::Held;
use crate::quorum::{Quorum, Tally, Until};
use crate::tasks::Work;
use crate::wire::lock::Release;

/// Sends `release` to every node, waiting for answers until `deadline` or
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
    deadline: Instant,
    finish_by: Instant,
    until: Until,
    skip: &[usize],
) -> Tally {
    let release = Arc::new(release);
    let finish_by = deadline.max(finish_by);
    quorum
        .fan_out(deadline, finish_by, until, |i| {
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
    let deadline = by.unwrap_or_else(|| quorum.deadline());
    let finish_by = Instant::now() + held.ttl();
    release_all(quorum, held.release(), deadline, finish_by, until, &[]).await
}

/// Releases `held` in the background (a dropped guard, a lost lock), as
/// tracked work that a shutdown waits for; never blocks. Without a runtime
/// nothing is sent and the keys expire with their ttl.
pub(crate) fn release_in_background(quorum: &Arc<Quorum>, held: &Arc<Held>) {
    let (task_quorum, held) = (Arc::clone(quorum), Arc::clone(held));
    quorum.tasks.spawn_if_running(Work::Release, async move {
        release_held(&task_quorum, &held, None, Until::All).await;
    });
}
