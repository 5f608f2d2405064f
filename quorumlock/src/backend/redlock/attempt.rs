//! One acquisition attempt: take the keys on every node, then finish (fence,
//! validity, guard) or undo.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::fence;
use super::kind::Kind;
use super::masters::Masters;
use super::release::{Deadlines, release_all};
use crate::backend::redlock::quorum::{Tally, Until};
use crate::backend::redlock::wire::fence::{FenceAsk, FenceRead};
use crate::backend::redlock::wire::keys;
use crate::backend::redlock::wire::lock::{Acquire, Release};
use crate::error::{Error, NodeErrorKind, Result, Setting};
use crate::lock::guard::Guard;
use crate::lock::resources::Resources;
use crate::lock::state::{Granted, Held};
use crate::options::LockOptions;
use crate::tasks::BackgroundWork;
use crate::{random, wall_clock};

/// One acquisition attempt on `resources`, of the given `kind` (a waiter's
/// attempt also queues the waiter where the resource is held: see
/// `waiter`).
///
/// Succeeds with a guard when a majority granted with enough validity left
/// (and, fenced, a majority agreed on a token). Otherwise every node is sent
/// the release of what this attempt may have set, and the error says why:
/// [`Error::Unreachable`] when failing nodes alone ruled out a majority,
/// [`Error::Held`] when another owner's keys did.
pub(crate) async fn attempt(
    masters: &Arc<Masters>,
    options: &LockOptions,
    resources: &Resources,
    ttl: Duration,
    kind: Kind,
) -> Result<Guard> {
    let ttl = masters.quorum.check_ttl(ttl, options.min_validity)?;
    if masters.quorum.one_slot() {
        check_one_slot(resources)?;
    }
    if masters.is_closed() {
        return Err(Error::Closed);
    }
    let attempt = Attempt {
        masters,
        options,
        resources,
        kind,
        token: random::token().into(),
        ttl,
        start: Instant::now(),
    };
    let mut undo = Undo {
        attempt: &attempt,
        armed: true,
    };
    let mut round = attempt.acquire_everywhere().await;
    record_in_span(&round.tally);
    // After the requests are on their way: keeps the nodes' clock rates
    // known (see `Quorum::life`) without delaying this attempt.
    masters.quorum.read_clocks(&round.tally);
    // Nodes that refused our SET hold nothing of ours (see below).
    let refused_by = std::mem::take(&mut round.tally.refused_by);
    let failure = if round.tally.reached() {
        match attempt.finish(&round).await {
            Ok(held) => {
                undo.armed = false;
                let guard = super::hold::guard(masters, held, options.auto_renew, options.min_validity);
                if masters.is_closed() {
                    // Taken while a shutdown released every lock: give it
                    // back too (or find the shutdown did).
                    let _ = guard.release().await;
                    return Err(Error::Closed);
                }
                return Ok(guard);
            }
            Err(error) => error,
        }
    } else {
        round.tally.no_majority()
    };
    tracing::debug!(resources = ?resources.names(), elapsed = ?attempt.start.elapsed(), error = %failure, "lock attempt failed");
    // Every node gets the release: a node that has not answered yet still
    // gets it queued behind its SET on the same connection (so it runs after
    // the SET). The caller waits until a majority confirmed (then no
    // majority holds anything of ours), within what is left of this
    // attempt's budget, so a hung node cannot hold it past the per-node
    // timeout; the rest completes in the background. Nodes that refused our
    // SET hold nothing of ours and are skipped.
    let deadlines = Deadlines {
        answer_by: round.deadline,
        finish_by: attempt.start + ttl,
    };
    release_all(
        &masters.quorum,
        attempt.release(),
        deadlines,
        Until::Answered,
        &refused_by,
    )
    .await;
    undo.armed = false;
    Err(failure)
}

/// Records the nodes of an attempt's round in the current span
/// (`quorumlock.acquire`).
fn record_in_span(tally: &Tally) {
    let span = tracing::Span::current();
    span.record("ok", tally.ok);
    span.record("refused", tally.refused);
    span.record("failed", tally.errors.len());
}

/// One attempt in progress: its kind, token and ttl, and when it
/// began (before the first request, so that the validity covers
/// everything).
struct Attempt<'a> {
    masters: &'a Arc<Masters>,
    options: &'a LockOptions,
    resources: &'a Resources,
    kind: Kind,
    token: Arc<str>,
    ttl: Duration,
    start: Instant,
}

/// The answers of every node to one attempt's acquire.
struct Round {
    tally: Tally,
    /// When the nodes' answers stopped counting.
    deadline: Instant,
    /// Fenced: what the nodes' fences said.
    fence: Option<FenceRound>,
}

/// What the fences of a fenced attempt's nodes said.
struct FenceRound {
    ask: FenceAsk,
    /// The highest fence a node reported.
    floor: u64,
    /// Counted grants whose node took the proposed token.
    took_proposal: usize,
}

impl Attempt<'_> {
    /// `start + ttl - drift`: until when a lock taken now is ours, unless a
    /// granting node's clock runs fast (see `finish`).
    fn valid_until(&self) -> Instant {
        self.start + self.ttl - self.masters.quorum.drift(self.ttl)
    }

    /// The owner-checked delete of what this attempt may have set.
    fn release(&self) -> Release {
        Release::new(Arc::clone(self.resources.keys()), Arc::clone(&self.token))
    }

    /// Sends the acquire to every node and counts the grants until the
    /// outcome is certain or the per-node timeout passed.
    async fn acquire_everywhere(&self) -> Round {
        let quorum = &self.masters.quorum;
        let sent_us = wall_clock::unix_us();
        let request = Arc::new(Acquire {
            keys: Arc::clone(self.resources.keys()),
            token: Arc::clone(&self.token),
            ttl_ms: crate::backend::redlock::wire::millis(self.ttl),
            mode: self
                .kind
                .mode(self.resources, || self.masters.proposer.proposal(sent_us)),
        });
        let fenced = request.mode.fence().map(|_| Arc::new(FenceReplies::default()));
        let deadline = quorum.deadline();
        let valid_until = self.valid_until();
        // A waiter's requests are driven past the attempt's deadline, until
        // its validity would have ended: a refusal that comes late must still
        // be reported to the waiter's place in line (see `Line::refused`).
        let line = self.kind.line();
        let finish_by = if line.is_some() { valid_until } else { deadline };
        let tally = quorum
            .fan_out(deadline, finish_by, Until::Decided, |i| {
                let (nodes, request) = (Arc::clone(&quorum.nodes), Arc::clone(&request));
                let (fenced, line) = (fenced.clone(), line.cloned());
                let too_fast = quorum.too_fast(i, self.ttl);
                async move {
                    let reply = nodes[i].acquire(&request).await;
                    if let Ok(Ok(acquired)) = &reply {
                        if let (Some(replies), Some(read)) = (&fenced, acquired.fence) {
                            // A grant that does not count (below) does not
                            // count for the proposal either.
                            replies.add(read, too_fast.is_none());
                        }
                        if let Some(report) = line
                            .filter(|_| !acquired.granted)
                            .and_then(|line| line.refused(i, valid_until))
                        {
                            report.await;
                        }
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
        let fence = request.mode.fence().cloned().zip(fenced).map(|(ask, replies)| {
            let replies = replies.taken();
            self.masters
                .proposer
                .learn(sent_us, replies.fastest_node_us.into_iter());
            FenceRound {
                ask,
                floor: replies.floor,
                took_proposal: replies.took_proposal,
            }
        });
        Round {
            tally,
            deadline,
            fence,
        }
    }

    /// A majority granted: agrees on the fencing token (when fenced), checks
    /// the validity left, and tells a waiter's place in line. Returns the
    /// held lock.
    async fn finish(&self, round: &Round) -> Result<Held> {
        let quorum = &self.masters.quorum;
        let lease = quorum.lease(self.start, self.ttl, &round.tally);
        let fence = match &round.fence {
            Some(fenced) if fenced.took_proposal >= round.tally.quorum() => Some(fenced.ask.proposal),
            Some(fenced) => {
                let owner = fence::Owner {
                    keys: self.resources.keys(),
                    token: &self.token,
                    fence_keys: &fenced.ask.keys,
                };
                let proposed = fence::propose(quorum, owner, fenced.floor, lease.valid_until()).await;
                // Rounds cut short by the end of the validity fail on their
                // slowest nodes: what ended them is the time used up.
                Some(
                    proposed.map_err(|error| match lease.left(self.options.min_validity) {
                        Err(used_up) => used_up,
                        Ok(_) => error,
                    })?,
                )
            }
            None => None,
        };
        let left = lease.left(self.options.min_validity)?;
        tracing::debug!(resources = ?self.resources.names(), granted = round.tally.ok, ?fence, ?left, "lock acquired");
        if let Some(line) = self.kind.line() {
            line.taken(lease.valid_until()).await;
        }
        let acquired = Granted {
            resources: self.resources.clone(),
            token: Arc::clone(&self.token),
            fence,
            lease,
            confirmed: round.tally.ok,
        };
        Ok(Held::new(acquired, self.options))
    }
}

/// What the fences of a fenced attempt's nodes said, gathered as replies
/// come in.
#[derive(Default)]
struct FenceReplies(Mutex<FencesSaid>);

/// See [`FenceReplies`].
#[derive(Default)]
struct FencesSaid {
    floor: u64,
    took_proposal: usize,
    /// The fastest replying node's clock: all the proposer keeps.
    fastest_node_us: Option<u64>,
}

impl FenceReplies {
    /// A node's reply; its taking the proposal counts only with `counted`.
    fn add(&self, read: FenceRead, counted: bool) {
        let mut said = self.0.lock().unwrap_or_else(|e| e.into_inner());
        said.floor = said.floor.max(read.floor);
        said.took_proposal += usize::from(read.took_proposal && counted);
        said.fastest_node_us = said.fastest_node_us.max(Some(read.node_us));
    }

    fn taken(&self) -> FencesSaid {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
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
        let quorum = Arc::clone(&self.attempt.masters.quorum);
        let release = self.attempt.release();
        let ttl = self.attempt.ttl;
        self.attempt
            .masters
            .quorum
            .tasks
            .spawn_if_running(BackgroundWork::Release, async move {
                let deadlines = Deadlines {
                    answer_by: quorum.deadline(),
                    finish_by: Instant::now() + ttl,
                };
                release_all(&quorum, release, deadlines, Until::All, &[]).await;
            });
    }
}

/// Checks that the lock's keys fit a Redis Cluster member: a script
/// there may touch keys of one hash slot only, so every resource of a
/// lock, and every key derived from one (fence, hand-off queue), must
/// share a slot.
pub(crate) fn check_one_slot(resources: &Resources) -> Result<()> {
    let advice = "on a Redis Cluster member a lock's keys must share a hash slot: give them one \
                  hash tag, as in {order:42}:stock and {order:42}:payment";
    if let Some(name) = resources.names().iter().find(|name| !keys::derives_in_slot(name)) {
        return Err(Error::config(
            Setting::Resources,
            format!(
                "resource {name:?} has a `}}` but no hash tag, so its fence and queue keys cannot share its slot; {advice}"
            ),
        ));
    }
    let first = keys::slot(&resources.names()[0]);
    if resources.names().iter().any(|name| keys::slot(name) != first) {
        let slots: Vec<String> = resources
            .names()
            .iter()
            .map(|name| format!("{name:?} in slot {}", keys::slot(name)))
            .collect();
        return Err(Error::config(
            Setting::Resources,
            format!("{}; {advice}", slots.join(", ")),
        ));
    }
    Ok(())
}
