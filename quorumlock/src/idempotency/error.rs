//! [`IdempotencyError`]: what can go wrong in [`Idempotency::run`].

use std::sync::Arc;

#[cfg(doc)]
use super::Idempotency;
use crate::error::{Error, NodeError, NodeErrors};

/// Everything that can go wrong in [`Idempotency::run`]: the errors of the
/// key's claim on the nodes ([`IdempotencyError::Lock`]: unreachable,
/// validity used up, bad settings, shut down), and what only an idempotent
/// run has: an operation running elsewhere ([`IdempotencyError::InProgress`]),
/// this call's operation failing ([`IdempotencyError::OperationFailed`]), an
/// earlier failure given back ([`IdempotencyError::CachedFailure`]) and a
/// result that did not reach a majority
/// ([`IdempotencyError::ResultNotStored`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The claim or the read of the key failed as a lock call fails:
    /// [`Error::Unreachable`], [`Error::ValidityUsedUp`], [`Error::Config`],
    /// [`Error::Closed`].
    #[error(transparent)]
    Lock(#[from] Error),
    /// Another caller holds the idempotency key: its operation is running
    /// (or it is claiming the key at this very moment) and no result is
    /// stored yet. Retry later, or let [`Idempotency`] wait for the result.
    #[error("operation in progress elsewhere: another caller's marker is on {pending} of {nodes} nodes")]
    InProgress {
        /// Nodes that hold another caller's in-progress marker.
        pending: usize,
        /// Nodes configured.
        nodes: usize,
    },
    /// The operation ran in this call and returned this error. Unless
    /// failures are cached, the key is free again and a retry runs the
    /// operation again.
    #[error("operation failed: {0}")]
    OperationFailed(Arc<dyn std::error::Error + Send + Sync>),
    /// The operation failed in an earlier call that cached its failure; it
    /// was not run again. The message is the earlier error's text.
    #[error("operation failed earlier (cached failure): {message}")]
    CachedFailure {
        /// The earlier error, as text.
        message: String,
    },
    /// The operation ran and succeeded in this call, but its result reached
    /// fewer than a majority of nodes. It may be stored on some of them: a
    /// later caller that reaches one of those gets it, one that does not may
    /// run the operation again once this call's marker expires. Do not retry
    /// blindly; `output` is the result, so the caller can still use it.
    #[error(
        "operation succeeded but its result may be only partially stored: written on {stored} of {nodes} nodes, {quorum} needed ({refused} no longer held our marker, {} failed){}",
        errors.len(),
        NodeErrors(errors)
    )]
    ResultNotStored {
        /// Nodes that stored the result.
        stored: usize,
        /// Nodes where our marker was gone (it expired, or another caller
        /// claimed the key after it expired).
        refused: usize,
        /// Nodes needed for a majority.
        quorum: usize,
        /// Nodes configured.
        nodes: usize,
        /// What went wrong on each failing node.
        errors: Vec<NodeError>,
        /// The operation's result.
        output: Arc<[u8]>,
    },
}
