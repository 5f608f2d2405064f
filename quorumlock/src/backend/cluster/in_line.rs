//! Attempts at a lock on a store that keeps its own line of waiters (an
//! etcd cluster, a ZooKeeper ensemble), tried again while the wait lasts.

use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::Recipe;
use crate::duration::deadline_after;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::resources::Resources;
use crate::metrics;
use crate::options::LockOptions;
use crate::random;

/// Takes the lock on `resources`: once when `waiting` is false (busy is
/// [`Error::Held`]), otherwise waiting in line until it is ours or
/// [`LockOptions::wait`] runs out (see [`take`]).
///
/// Boxed: a lock call's future is as large as the largest path it may take,
/// and a one-cluster store's request state (the etcd client's is about
/// 12 KB) would make every Redis lock call carry and copy it
/// (docs/benchmarks.md has the cost). A call to such a store takes a
/// network round trip, next to which the box costs nothing.
pub(crate) fn lock<'a, S: Recipe>(
    store: &'a Arc<S>,
    options: &'a LockOptions,
    resources: &'a Resources,
    ttl: Duration,
    waiting: bool,
) -> BoxFuture<'a, Result<Guard>> {
    async move {
        let ttl = store.lock_ttl(options, ttl)?;
        take(store, options, resources, ttl, waiting).await
    }
    .boxed()
}

/// Runs the store's attempt once when `waiting` is false, otherwise until it takes
/// the lock or [`LockOptions::wait`] runs out: each attempt gets the wait's
/// deadline, and one that failed on the store (unreachable, lost, validity
/// used up) is tried again after the retry delay while the wait and the
/// attempt budget last. A client shut down ends it with [`Error::Closed`].
///
/// Returns the guard of what the attempt took, with how many attempts that
/// made; records each attempt's duration and outcome ([`metrics::attempt`]).
///
/// A waiter whose place vanished ([`Error::Lost`]: the store expired its
/// lease or session, a long failover) that may not try again gets
/// [`Recipe::lost_in_line`] instead, which says why it gave up.
async fn take<S: Recipe>(
    store: &Arc<S>,
    options: &LockOptions,
    resources: &Resources,
    ttl: S::LockTtl,
    waiting: bool,
) -> Result<Guard> {
    let deadline = waiting.then(|| deadline_after(options.wait));
    let mut attempts = 0;
    loop {
        if store.state().is_closed() {
            return Err(Error::Closed);
        }
        attempts += 1;
        let started = Instant::now();
        let result = store.attempt(options, resources, ttl, deadline).await;
        metrics::attempt(started.elapsed(), &result);
        let error = match result {
            Ok((held, kept)) => {
                let guard = store.guard(held, kept, options.auto_renew, options.min_validity);
                return Ok(guard.with_attempts(attempts));
            }
            Err(error) => error,
        };
        let retry_at = Instant::now() + random::jitter(options.retry_delay);
        let retriable = matches!(
            error,
            Error::Unreachable { .. } | Error::Lost { .. } | Error::ValidityUsedUp { .. }
        );
        let budget_left = options.max_attempts.is_none_or(|max| attempts < max);
        match deadline {
            Some(deadline) if retriable && budget_left && retry_at < deadline => {
                tracing::debug!(%error, "lock attempt failed; trying again");
                tokio::time::sleep_until(retry_at).await;
            }
            _ if matches!(error, Error::Lost { .. }) => return Err(store.lost_in_line()),
            _ => return Err(error),
        }
    }
}
