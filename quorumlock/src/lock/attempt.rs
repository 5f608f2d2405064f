//! One acquisition attempt: take the keys on every node, then finish (fence,
//! validity, guard) or undo.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::fence;
use super::guard::Guard;
use super::release::release_all;
use super::resources::Resources;
use super::shared::Shared;
use super::state::Held;
use super::waiter::queue::{self, Refusals};
use crate::error::{Error, NodeErrorKind, Result};
use crate::options::LockOptions;
use crate::quorum::{self, Tally, Until};
use crate::random;
use crate::tasks::Work;
use crate::wire::keys;
use crate::wire::lock::{Acquire, AcquireMode, Release};
use crate::wire::queue::QueueEntry;

/// One acquisition attempt on `resources`. With `queue`, a waiter's attempt:
/// where the resource is held, the waiter is queued for it in the same
/// request (see `waiter`).
///
/// Succeeds with a guard when a majority granted with enough validity left
/// (and, fenced, a majority agreed on a token). Otherwise every node is sent
/// the release of what this attempt may have set, and the error says why:
/// [`Error::Unreachable`] when failing nodes alone ruled out a majority,
/// [`Error::Held`] when another owner's keys did.
pub(crate) async fn attempt(
    shared: &Arc<Shared>,
    options: &LockOptions,
    resources: &Resources,
    ttl: Duration,
    queue: Option<&QueueEntry>,
) -> Result<Guard> {
    let (ttl, drift) = shared.quorum.check_ttl(ttl, options.min_validity)?;
    if shared.is_closed() {
        return Err(Error::Closed);
    }
    let attempt = Attempt {
        shared,
        options,
        resources,
        token: random::token().into(),
        ttl,
        drift,
        start: Instant::now(),
    };
    let mut undo = Undo {
        attempt: &attempt,
        armed: true,
    };
    let round = attempt.acquire_everywhere(queue).await;
    // After the requests are on their way: keeps the nodes' clock rates
    // known (see `Quorum::life`) without delaying this attempt.
    shared.quorum.read_clocks(&round.tally);
    let failure = if round.tally.reached() {
        match attempt.finish(&round, queue).await {
            Ok(held) => {
                undo.armed = false;
                let guard = Guard::new(shared, held, options.auto_renew, options.min_validity);
                if shared.is_closed() {
                    // Taken while a shutdown released every lock: give it
                    // back too (or find the shutdown did).
                    let _ = guard.release().await;
                    return Err(Error::Closed);
                }
                return Ok(guard);
            }
            Err(error) => error,
        }
    } else if round.tally.failures_rule_out_majority() {
        round.tally.unreachable()
    } else {
        Error::Held {
            refused: round.tally.refused,
            nodes: round.tally.nodes,
            errors: round.tally.errors,
        }
    };
    tracing::debug!(resources = ?resources.names(), elapsed = ?attempt.start.elapsed(), error = %failure, "lock attempt failed");
    // Every node gets the release: a node that has not answered yet still
    // gets it queued behind its SET on the same connection (so it runs after
    // the SET). The caller waits until a majority confirmed (then no
    // majority holds anything of ours), within what is left of this
    // attempt's budget, so a hung node cannot hold it past the per-node
    // timeout; the rest completes in the background. Nodes that refused our
    // SET hold nothing of ours and are skipped.
    let finish_by = attempt.start + ttl;
    release_all(
        &shared.quorum,
        attempt.release(),
        round.deadline,
        finish_by,
        Until::Answered,
        &round.refused_by,
    )
    .await;
    undo.armed = false;
    Err(failure)
}

/// One attempt in progress: its token, ttl and drift, and when it began
/// (before the first request, so that the validity covers everything).
struct Attempt<'a> {
    shared: &'a Arc<Shared>,
    options: &'a LockOptions,
    resources: &'a Resources,
    token: Arc<str>,
    ttl: Duration,
    drift: Duration,
    start: Instant,
}

/// The answers of every node to one attempt's acquire.
struct Round {
    tally: Tally,
    /// Nodes that refused (they hold nothing of ours).
    refused_by: Vec<usize>,
    /// When the nodes' answers stopped counting.
    deadline: Instant,
    /// Fenced: the fence keys, and the highest fence a node reported.
    fence: Option<(Arc<[String]>, u64)>,
    /// A waiter's attempt: the nodes that refused, and so queued it.
    refusals: Option<Arc<Refusals>>,
}

impl Attempt<'_> {
    /// `start + ttl - drift`: until when a lock taken now is ours.
    fn valid_until(&self) -> Instant {
        self.start + self.ttl - self.drift
    }

    /// The owner-checked delete of what this attempt may have set.
    fn release(&self) -> Release {
        Release::new(Arc::clone(self.resources.keys()), Arc::clone(&self.token))
    }

    /// Sends the acquire to every node and counts the grants until the
    /// outcome is certain or the per-node timeout passed.
    async fn acquire_everywhere(&self, queue: Option<&QueueEntry>) -> Round {
        let (quorum, options, resources) = (&self.shared.quorum, self.options, self.resources);
        let fence_keys: Option<Arc<[String]>> = options
            .fenced
            .then(|| resources.names().iter().map(|r| keys::fence(r)).collect());
        let mode = match (&fence_keys, queue) {
            (Some(fence_keys), _) => AcquireMode::Fenced(Arc::clone(fence_keys)),
            (None, Some(entry)) => AcquireMode::Queued(Arc::new(entry.clone())),
            (None, None) => AcquireMode::Plain,
        };
        let request = Arc::new(Acquire {
            keys: Arc::clone(resources.keys()),
            token: Arc::clone(&self.token),
            ttl_ms: crate::wire::millis(self.ttl),
            mode,
        });
        let fence_floor = options.fenced.then(|| Arc::new(AtomicU64::new(0)));
        let refusals = queue.map(|_| Arc::new(Refusals::default()));
        let deadline = quorum.deadline();
        let valid_until = self.valid_until();
        // A waiter's requests are driven past the attempt's deadline, until
        // its validity would have ended: a refusal that comes late must still
        // take the waiter off that node's queue (see `Refusals`).
        let finish_by = if queue.is_some() { valid_until } else { deadline };
        let tally = quorum
            .fan_out(deadline, finish_by, Until::Decided, |i| {
                let (nodes, request) = (Arc::clone(&quorum.nodes), Arc::clone(&request));
                let (fence_floor, refusals) = (fence_floor.clone(), refusals.clone());
                // Only a waiter's attempt sends more from the request itself.
                let leaver = queue.map(|_| Arc::clone(quorum));
                let too_fast = quorum.too_fast(i, self.ttl);
                async move {
                    let reply = nodes[i].acquire(&request).await;
                    if let (Some(floor), Ok(Ok(acquired))) = (&fence_floor, &reply) {
                        floor.fetch_max(acquired.fence.unwrap_or(0), Ordering::Relaxed);
                    }
                    // A refusal queued the waiter there (see `Refusals`).
                    // Boxed: the rare path stays out of every request's future.
                    if let (Some(quorum), Some(refusals), AcquireMode::Queued(entry), Ok(Ok(acquired))) =
                        (&leaver, &refusals, &request.mode, &reply)
                        && !acquired.granted
                        && refusals.refused(i)
                    {
                        Box::pin(queue::leave(quorum, entry, &[i], valid_until)).await;
                    }
                    // A grant from a node whose clock runs too fast to keep
                    // the key usefully long counts as that node's failure
                    // (its key goes with the lock's release or its ttl).
                    reply.map(|acked| {
                        acked.and_then(|acquired| match too_fast {
                            Some(rate) if acquired.granted => Err(NodeErrorKind::ClockTooFast { rate }),
                            _ => Ok(acquired.granted),
                        })
                    })
                }
            })
            .await;
        Round {
            refused_by: tally.refused_by.clone(),
            tally,
            deadline,
            fence: fence_keys.zip(fence_floor.map(|floor| floor.load(Ordering::Relaxed))),
            refusals,
        }
    }

    /// A majority granted: agrees on the fencing token (when fenced), checks
    /// the validity left, and takes a waiter off the queues of the nodes that
    /// refused. Returns the held lock.
    async fn finish(&self, round: &Round, queue: Option<&QueueEntry>) -> Result<Held> {
        let (quorum, resources) = (&self.shared.quorum, self.resources);
        // How long the granting nodes keep our keys: the ttl, or less when
        // one of their clocks runs fast.
        let life = quorum.life(self.ttl, &round.tally);
        let valid_until = self.start + life.saturating_sub(self.drift);
        let fence = match &round.fence {
            Some((fence_keys, floor)) => Some(fence::propose(quorum, fence_keys, *floor, valid_until).await?),
            None => None,
        };
        let (ttl, elapsed, min) = (self.ttl, self.start.elapsed(), self.options.min_validity);
        match quorum::validity(life, elapsed, self.drift) {
            Some(left) if left >= min => {
                tracing::debug!(resources = ?resources.names(), granted = round.tally.ok, ?fence, ?elapsed, ?left, "lock acquired");
            }
            _ => return Err(Error::ValidityUsedUp { elapsed, ttl, min }),
        }
        if let (Some(entry), Some(refusals)) = (queue, &round.refusals) {
            // The nodes that granted took the waiter off their queue in the
            // same call; those that refused still list it.
            queue::leave(quorum, entry, &refusals.taken(), valid_until).await;
        }
        Ok(Held::new(
            resources.clone(),
            Arc::clone(&self.token),
            fence,
            ttl,
            self.start,
            valid_until,
            round.tally.ok,
            self.options,
        ))
    }
}

/// Releases the keys of an attempt dropped before it finished (its caller
/// was cancelled: a timeout, a `select!`, a signal). Requests already handed
/// to the nodes' connections may still set our keys; the release, handed
/// over after them, runs after them on each node. Sent in the background
/// as tracked work (see `Redlock::shutdown`).
struct Undo<'a> {
    attempt: &'a Attempt<'a>,
    /// Cleared once the attempt ends on its own: with a lock that a guard
    /// will own, or after its own release.
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let quorum = Arc::clone(&self.attempt.shared.quorum);
        let release = self.attempt.release();
        let ttl = self.attempt.ttl;
        self.attempt
            .shared
            .quorum
            .tasks
            .spawn_if_running(Work::Release, async move {
                let deadline = quorum.deadline();
                release_all(&quorum, release, deadline, Instant::now() + ttl, Until::All, &[]).await;
            });
    }
}
