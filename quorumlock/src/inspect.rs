//! Operator tools: what each node holds for a lock ([`Redlock::inspect`]),
//! and clearing it ([`Redlock::unlock`], [`Redlock::force_unlock`]).
//!
//! None of this is for taking or keeping a lock: an inspection is a
//! snapshot that may be out of date when it returns, and the unlocks act on
//! a lock that someone else holds. They are for the person on call who
//! asks "is it locked, by whom, for how long?", and for clearing a lock
//! whose holder is known to be gone.

use crate::client::Redlock;
use crate::error::{Error, Result, Setting};
use crate::lock::inspection::{Inspection, UnlockReport};
#[cfg(doc)]
use crate::lock::inspection::{KeyState, Verdict};
use crate::lock::resources::Resources;

impl Redlock {
    /// What every node holds for `resource`: its value (the holder's token),
    /// remaining ttl and queued waiters, or the node's error, each node's
    /// facts read in one atomic step; and what a majority of all nodes says
    /// ([`Verdict`]).
    ///
    /// Waits for every node, up to the node timeout. Changes nothing. An
    /// operator tool: decide nothing about taking a lock on it, since the
    /// lock may change hands as soon as this returns.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a resource name that no lock may have (empty,
    /// or in the reserved namespace), [`Error::Closed`] after
    /// [`Redlock::shutdown`]. A failing node is not an error: it is
    /// reported as [`KeyState::Failed`].
    pub async fn inspect(&self, resource: &str) -> Result<Inspection> {
        let resource = self.operable(resource)?;
        Ok(self.backend.inspect(resource).await)
    }

    /// Operator tool: releases `resource` where it holds `token` (the
    /// holder's token, as [`Redlock::inspect`] shows it), on every node,
    /// owner-checked as a guard's release is: a node where the lock has
    /// meanwhile passed to another token keeps it.
    ///
    /// For a holder known to be gone whose lock should not wait out its
    /// ttl. A holder that is still running is not told: it goes on as if it
    /// held the lock, and its next renewal either re-creates the keys
    /// (healing, [`RedlockBuilder::heal`](crate::RedlockBuilder::heal)) or,
    /// where another process took the lock meanwhile, finds it lost; until
    /// then both run. Waits for every node, up to the node timeout.
    ///
    /// # Errors
    ///
    /// As [`Redlock::inspect`], and [`Error::Config`] for an empty token.
    /// Failing nodes are reported in the [`UnlockReport`].
    pub async fn unlock(&self, resource: &str, token: &str) -> Result<UnlockReport> {
        let resource = self.operable(resource)?;
        if token.is_empty() {
            return Err(Error::config(Setting::Token, "empty token"));
        }
        Ok(self.backend.unlock(resource, Some(token)).await)
    }

    /// Operator tool: deletes whatever the lock key of `resource` holds, on
    /// every node, and reports per node what it deleted. Each node reads and
    /// deletes in one atomic step, so the value reported is the one deleted.
    ///
    /// Not owner-checked: it frees the lock whoever holds it, and a holder
    /// that is still running is not told (see [`Redlock::unlock`]), while
    /// someone else may take the lock at once. Use it for a
    /// lock whose holder is gone, or for a key that is not a lock at all
    /// (no ttl, another type: see [`KeyState`]). The next queued waiter is
    /// woken as after a release. Waits for every node, up to the node
    /// timeout.
    ///
    /// # Errors
    ///
    /// As [`Redlock::inspect`]. Failing nodes are reported in the
    /// [`UnlockReport`].
    pub async fn force_unlock(&self, resource: &str) -> Result<UnlockReport> {
        let resource = self.operable(resource)?;
        Ok(self.backend.unlock(resource, None).await)
    }

    /// `resource` checked as a lock's name is, for a client still open.
    fn operable(&self, resource: &str) -> Result<String> {
        let resources = Resources::from(resource).validated()?;
        if self.backend.is_closed() {
            return Err(Error::Closed);
        }
        Ok(resources.names()[0].clone())
    }
}
