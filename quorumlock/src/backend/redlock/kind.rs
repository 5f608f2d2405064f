//! [`Kind`]: what an attempt does besides taking the keys, chosen once per
//! attempt, and [`Line`]: what a waiter's attempt reports to the waiter's
//! place in line.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::backend::redlock::wire::fence::FenceAsk;
use crate::backend::redlock::wire::keys;
use crate::backend::redlock::wire::lock::AcquireMode;
use crate::backend::redlock::wire::queue::QueueEntry;
use crate::lock::resources::Resources;

/// What an attempt does besides taking the keys.
#[derive(Clone)]
pub(crate) enum Kind {
    /// Takes the keys: `SET NX PX`, or the all-or-nothing script for
    /// several resources.
    Plain,
    /// Also agrees on a fencing token: the acquire reads each node's fence,
    /// and a second round proposes the token (see `redlock::fence`).
    Fenced,
    /// A waiter's attempt on one resource: where the resource is held, the
    /// acquire request itself queues the waiter, and the attempt reports to
    /// its place in line.
    Queued(Arc<dyn Line>),
    /// Both, for a fenced waiter.
    FencedQueued(Arc<dyn Line>),
}

impl Kind {
    /// The kind of an attempt that is `fenced` (by its options) and carries
    /// a waiter's place in `line`, if any.
    pub(crate) fn new(fenced: bool, line: Option<Arc<dyn Line>>) -> Kind {
        match line {
            None if fenced => Kind::Fenced,
            None => Kind::Plain,
            Some(line) if fenced => Kind::FencedQueued(line),
            Some(line) => Kind::Queued(line),
        }
    }

    /// The waiter's place in line this attempt reports to.
    pub(crate) fn line(&self) -> Option<&Arc<dyn Line>> {
        match self {
            Kind::Queued(line) | Kind::FencedQueued(line) => Some(line),
            Kind::Plain | Kind::Fenced => None,
        }
    }

    /// What the acquire request does on each node for `resources`; a
    /// fenced one proposes the token `proposal` (see `fence::Proposer`).
    pub(crate) fn mode(&self, resources: &Resources, proposal: impl FnOnce() -> u64) -> AcquireMode {
        let fence = || FenceAsk {
            keys: resources.names().iter().map(|r| keys::fence(r)).collect(),
            proposal: proposal(),
        };
        match self {
            Kind::Plain => AcquireMode::Plain,
            Kind::Fenced => AcquireMode::Fenced(fence()),
            Kind::Queued(line) => AcquireMode::Queued(Arc::clone(line.entry())),
            Kind::FencedQueued(line) => AcquireMode::FencedQueued(fence(), Arc::clone(line.entry())),
        }
    }
}

/// A waiter's place in line, as an attempt that carries it sees it. The
/// attempt only reports what the nodes did; what that means for the queues
/// is the waiter's business (`waiter::queue`).
pub(crate) trait Line: Send + Sync {
    /// The entry the attempt's requests carry.
    fn entry(&self) -> &Arc<QueueEntry>;

    /// Node `node` refused the attempt, and so queued the waiter there. Runs
    /// inside that node's request, which is driven until `finish_by` (the
    /// attempt's validity), also after the attempt decided. `None` when
    /// there is nothing to send.
    fn refused(&self, node: usize, finish_by: Instant) -> Option<BoxFuture<'static, ()>>;

    /// The attempt took the lock; what must follow is sent by `finish_by`.
    fn taken(&self, finish_by: Instant) -> BoxFuture<'static, ()>;
}
