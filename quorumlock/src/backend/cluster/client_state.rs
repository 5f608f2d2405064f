//! What every lock of a client on one cluster shares, whichever store the
//! cluster is: the timing settings, the background work, the renewal of
//! held locks and the registry a shutdown gives back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Timing;
use crate::error::{Error, Result};
use crate::lock::holders::Holders;
use crate::lock::lease::{Lease, TtlUnit, check_ttl, drift};
use crate::lock::renewal::Renewal;
use crate::tasks::{BackgroundWork, Tasks};

/// A client's state on one cluster: `Kept` is what the store keeps of one
/// held lock (its keys, its nodes), `Renewed` what its renewal round keeps
/// of one auto-renewed lock.
pub(crate) struct ClientState<Kept, Renewed> {
    /// Every request's bound: the client's node timeout, and at least the
    /// store's own minimum.
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    drift_factor: f64,
    drift_fixed: Duration,
    /// How the store keeps a ttl.
    ttl_unit: TtlUnit,
    pub(crate) tasks: Arc<Tasks>,
    /// Every auto-renewed lock, and the renewal task.
    pub(crate) renewal: Arc<Renewal<Renewed>>,
    /// Every lock a guard of this client holds, for a shutdown.
    pub(crate) holders: Holders<Arc<Kept>>,
}

impl<Kept, Renewed> ClientState<Kept, Renewed> {
    /// The state of a new client with `timing`, whose requests get
    /// `min_request_timeout` at least (a store that needs a round of its
    /// own quorum per request cannot answer in a Redis node's time), on a
    /// store that keeps ttls in `ttl_unit`.
    pub(crate) fn new(
        timing: Timing,
        min_request_timeout: Duration,
        ttl_unit: TtlUnit,
        tasks: Arc<Tasks>,
    ) -> Self {
        ClientState {
            request_timeout: timing.node_timeout.max(min_request_timeout),
            connect_timeout: timing.connect_timeout,
            drift_factor: timing.drift_factor,
            drift_fixed: timing.drift_fixed,
            ttl_unit,
            tasks,
            renewal: Arc::default(),
            holders: Holders::default(),
        }
    }

    /// The drift allowance for `ttl` ([`drift`]).
    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        drift(ttl, self.drift_factor, self.drift_fixed)
    }

    /// The ttl rule ([`check_ttl`]) in the store's unit: room for a
    /// request's timeout besides the drift and the minimum validity asked
    /// for.
    pub(crate) fn check_ttl(&self, requested: Duration, min_validity: Duration) -> Result<Duration> {
        check_ttl(
            requested,
            self.ttl_unit,
            self.request_timeout,
            |ttl| self.drift(ttl),
            min_validity,
        )
    }

    /// What a request sent at `sent` and answered makes ours, for a lock of
    /// `ttl` that the store keeps for `life` from then (the ttl itself, or
    /// less where the store vouches for less).
    pub(crate) fn lease(&self, sent: Instant, ttl: Duration, life: Duration) -> Lease {
        Lease {
            start: sent,
            ttl,
            life,
            drift: self.drift(life),
        }
    }

    /// Whether the client was shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.tasks.is_closed()
    }

    /// The lock is no longer ours ([`Error::Closed`] once the client shut
    /// down, which takes every lock).
    pub(crate) fn lost(&self) -> Error {
        if self.is_closed() {
            return Error::Closed;
        }
        Error::Lost {
            confirmed: 0,
            quorum: 1,
            nodes: 1,
        }
    }

    /// Runs `cleanup` in the background as tracked release work, again
    /// every `every` until it succeeds or `retry_for` has passed (after
    /// which the store has ended what it would delete by itself: a lease
    /// expired, a session gone); never blocks. Without a runtime nothing
    /// runs, and the store's own expiry ends it. `gave_up` is logged with
    /// the last error when the time runs out.
    pub(crate) fn retry_in_background<F, Fut>(
        &self,
        every: Duration,
        retry_for: Duration,
        gave_up: String,
        mut cleanup: F,
    ) where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send,
    {
        let until = Instant::now() + retry_for;
        self.tasks.spawn_if_running(BackgroundWork::Release, async move {
            loop {
                let Err(error) = cleanup().await else {
                    return;
                };
                if Instant::now() + every >= until {
                    tracing::warn!(%error, "{gave_up}");
                    return;
                }
                tokio::time::sleep(every).await;
            }
        });
    }
}
