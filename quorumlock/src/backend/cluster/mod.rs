//! What the two stores that are one cluster each (etcd, ZooKeeper) share:
//! the cluster counts as one member, whose own quorum (Raft, ZAB) replaces
//! the Redlock majority; the errors in a member-of-one's terms.

pub(crate) mod inspect;

use std::future::Future;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lock::report::ReleaseReport;

/// Another owner holds the lock.
pub(crate) fn held() -> Error {
    Error::Held {
        refused: 1,
        nodes: 1,
        errors: Vec::new(),
    }
}

/// The lock is no longer ours ([`Error::Closed`] once the client shut
/// down, which takes every lock).
pub(crate) fn lost(closed: bool) -> Error {
    if closed {
        return Error::Closed;
    }
    Error::Lost {
        confirmed: 0,
        quorum: 1,
        nodes: 1,
    }
}

/// A release on the cluster: its keys `deleted`, or kept until
/// `kept_until`; or, when a loss or a shutdown began giving the lock back
/// first (`claimed` false), nothing more to do.
pub(crate) async fn release(
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
