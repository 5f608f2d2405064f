//! One lease's keep-alive stream.

use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::Instant;

use super::Cluster;
use crate::error::{NodeErrorKind, Result, StoreFailure};

/// The keep-alive stream of one lease. After any failed or late answer it
/// must be dropped and a new one opened: an answer that comes late on this
/// stream would be taken for the answer to the next keep-alive, and credit
/// the lease with a life it may not have.
pub(crate) struct Keeper {
    lease: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
}

/// What one keep-alive found.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeptAlive {
    /// The lease lives at least `ttl` past `sent` (the instant the request
    /// left, before the leader reset the lease's clock).
    Alive { sent: Instant, ttl: Duration },
    /// The lease expired or was revoked: every key attached to it is gone.
    Expired,
}

impl Keeper {
    /// Opens the stream for `lease`.
    pub(crate) async fn open(store: &Cluster, lease: i64) -> Result<Keeper> {
        let mut client = store.client().await?.lease_client();
        let (keeper, stream) = store.call(client.keep_alive(lease)).await?;
        Ok(Keeper {
            lease,
            keeper,
            stream,
        })
    }

    /// The lease this stream keeps alive.
    pub(crate) fn lease(&self) -> i64 {
        self.lease
    }

    /// Sends one keep-alive and waits for its answer until `deadline`.
    pub(crate) async fn renew(&mut self, store: &Cluster, deadline: Instant) -> Result<KeptAlive> {
        let sent = Instant::now();
        let answer = async {
            self.keeper.keep_alive().await?;
            self.stream.message().await
        };
        match store.call_by(deadline, answer).await? {
            Some(reply) if reply.ttl() > 0 => Ok(KeptAlive::Alive {
                sent,
                ttl: Duration::from_secs(reply.ttl().unsigned_abs()),
            }),
            Some(_) => Ok(KeptAlive::Expired),
            None => Err(store.unreachable(NodeErrorKind::Etcd(StoreFailure::new(format!(
                "the keep-alive stream of lease {:x} ended",
                self.lease
            ))))),
        }
    }
}
