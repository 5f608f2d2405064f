//! Attempts at a lock on a store that keeps its own line of waiters (an
//! etcd cluster, a ZooKeeper ensemble), tried again while the wait lasts.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Store, is_closed};
use crate::duration::deadline_after;
use crate::error::{Error, Result};
use crate::lock::guard::Guard;
use crate::lock::state::Held;
use crate::metrics;
use crate::options::LockOptions;
use crate::random;

/// Runs `attempt` once when `waiting` is false, otherwise until it takes
/// the lock or [`LockOptions::wait`] runs out: each attempt gets the wait's
/// deadline, and one that failed on the store (unreachable, lost, validity
/// used up) is tried again after the retry delay while the wait and the
/// attempt budget last. A client shut down ends it with [`Error::Closed`].
///
/// Returns the guard of what `attempt` took, with how many attempts that
/// made; records each attempt's duration and outcome ([`metrics::attempt`]).
///
/// A waiter whose place vanished ([`Error::Lost`]: the store expired its
/// lease or session, a long failover) that may not try again gets
/// [`Store::lost_in_line`] instead, which says why it gave up.
pub(crate) async fn take<S, F, Fut>(
    store: &Arc<S>,
    options: &LockOptions,
    waiting: bool,
    mut attempt: F,
) -> Result<Guard>
where
    S: Store,
    F: FnMut(Option<Instant>) -> Fut,
    Fut: Future<Output = Result<(Held, S::Kept)>>,
{
    let deadline = waiting.then(|| deadline_after(options.wait));
    let mut attempts = 0;
    loop {
        if is_closed(&**store) {
            return Err(Error::Closed);
        }
        attempts += 1;
        let started = Instant::now();
        let result = attempt(deadline).await;
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
