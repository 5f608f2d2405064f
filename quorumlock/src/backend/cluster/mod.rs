//! What the two stores that are one cluster each (etcd, ZooKeeper) share:
//! the cluster counts as one member, whose own quorum (Raft, ZAB) replaces
//! the Redlock majority. Each is a [`Store`] that takes its locks by a
//! [`Recipe`]; a guard's hold on either is a
//! [`ClusterHold`], and a shutdown of either is [`shutdown`]: written once,
//! with the errors in a member-of-one's terms.

mod client_state;
mod hold;
pub(crate) mod in_line;
pub(crate) mod inspect;
pub(crate) mod url;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

pub(crate) use self::client_state::ClientState;
pub(crate) use self::hold::ClusterHold;
use crate::backend::Released;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::lease::Lease;
use crate::lock::report::ReleaseReport;
use crate::lock::resources::Resources;
use crate::lock::state::Held;
use crate::options::LockOptions;
use crate::tasks::BackgroundWork;

/// One held lock on a store: what the store's half of an extend or a
/// release works on.
pub(crate) struct Lock<'a, S: Store> {
    pub(crate) store: &'a Arc<S>,
    pub(crate) held: &'a Held,
    pub(crate) kept: &'a Arc<S::Kept>,
}

impl<'a, S: Store> Lock<'a, S> {
    pub(crate) fn new(store: &'a Arc<S>, held: &'a Held, kept: &'a Arc<S::Kept>) -> Self {
        Lock { store, held, kept }
    }
}

/// A store that is one cluster: what the shared code needs of it.
pub(crate) trait Store: Send + Sync + fmt::Debug + Sized + 'static {
    /// What the store keeps of one held lock: its keys, its nodes.
    type Kept: Send + Sync + fmt::Debug + 'static;

    /// What the store's renewal round keeps of one auto-renewed lock.
    type Renewed: Clone + Send + Sync + 'static;

    /// What every lock of the client shares: timing, tasks, renewal,
    /// holders.
    fn state(&self) -> &ClientState<Self::Kept, Self::Renewed>;

    /// The store's half of an extend: the lock's keys or nodes confirmed,
    /// and made to last `ttl`; what that makes ours. [`Error::Lost`] when
    /// they are gone.
    fn renew_now(lock: Lock<'_, Self>, ttl: Duration) -> BoxFuture<'_, Result<Lease>>;

    /// Gives the lock back: its keys or nodes deleted, or kept until the
    /// instant returned (a minimum hold).
    fn give_back(lock: Lock<'_, Self>) -> BoxFuture<'_, Result<Option<Instant>>>;

    /// [`Store::give_back`] as tracked background work (a dropped guard, a
    /// lost lock): a give-back that fails has left its own retries running.
    fn give_back_in_background(self: &Arc<Self>, held: &Arc<Held>, kept: &Arc<Self::Kept>) {
        let (store, held, kept) = (Arc::clone(self), Arc::clone(held), Arc::clone(kept));
        self.state()
            .tasks
            .spawn_if_running(BackgroundWork::Release, async move {
                if let Err(error) = Self::give_back(Lock::new(&store, &held, &kept)).await {
                    tracing::debug!(%error, ?store, "release failed; trying again in the background");
                }
            });
    }

    /// The guard of a lock `attempt` took: registered with the store's
    /// holders, and with its renewal when `renew`.
    fn guard(self: &Arc<Self>, held: Held, kept: Self::Kept, renew: bool, min_validity: Duration) -> Guard;

    /// What a shutdown ends last, once the locks are given back and the
    /// background work is done (a ZooKeeper session).
    fn close(&self) -> BoxFuture<'_, ()>;
}

/// How a one-cluster store takes a lock: its recipe.
pub(crate) trait Recipe: Store {
    /// What a lock call's ttl becomes in the store's terms.
    type LockTtl: Copy + Send + Sync + 'static;

    /// The ttl a lock call asks for, checked ([`ClientState::check_ttl`])
    /// and in the store's terms; an option the store cannot honour refused.
    fn lock_ttl(&self, options: &LockOptions, ttl: Duration) -> Result<Self::LockTtl>;

    /// One attempt at the lock on `resources`, in line until `deadline`
    /// (`None`: not waiting, busy is [`Error::Held`]). Whatever it created
    /// is deleted unless it succeeds, also when its future is dropped.
    fn attempt<'a>(
        self: &'a Arc<Self>,
        options: &'a LockOptions,
        resources: &'a Resources,
        ttl: Self::LockTtl,
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<(Held, Self::Kept)>>;

    /// The error of a waiter whose place in line vanished and that may not
    /// try again: why it gave up, in the store's words.
    fn lost_in_line(&self) -> Error;
}

/// Ends the client on `store`: no new lock, every held lock given back by
/// `deadline` (each with whether that was confirmed), the background work
/// still running at the deadline, then what the store closes last.
pub(crate) async fn shutdown<S: Store>(store: &Arc<S>, deadline: Instant) -> Released {
    let state = store.state();
    state.tasks.closing().cancel();
    let outcomes = state
        .holders
        .give_back_all(|held, kept| async move {
            let given = tokio::time::timeout_at(deadline, S::give_back(Lock::new(store, &held, &kept))).await;
            matches!(given, Ok(Ok(_)))
        })
        .await;
    let unfinished = state.tasks.close_and_wait(deadline).await;
    store.close().await;
    (outcomes, unfinished)
}

/// Another owner holds the lock.
pub(crate) fn held() -> Error {
    Error::Held {
        refused: 1,
        nodes: 1,
        errors: Vec::new(),
    }
}

/// A release on the cluster: its keys `deleted`, or kept until
/// `kept_until`; or, when a loss or a shutdown began giving the lock back
/// first (`claimed` false), nothing more to do.
async fn release(
    claimed: bool,
    give_back: impl Future<Output = Result<Option<Instant>>>,
) -> Result<ReleaseReport> {
    if !claimed {
        return Ok(one_member(false, None));
    }
    let kept_until = give_back.await?;
    Ok(one_member(kept_until.is_none(), kept_until))
}

fn one_member(deleted: bool, kept_until: Option<Instant>) -> ReleaseReport {
    ReleaseReport {
        nodes: 1,
        confirmed: 1,
        deleted: usize::from(deleted),
        kept: usize::from(kept_until.is_some()),
        kept_until,
    }
}
