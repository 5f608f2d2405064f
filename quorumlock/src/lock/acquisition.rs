//! What it took to take a lock, for the caller's own logs and metrics.

use std::time::Duration;

use super::state::Held;

/// How a lock was taken ([`Guard::acquisition`](crate::Guard::acquisition)).
///
/// ```no_run
/// # use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = quorumlock::Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let guard = redlock.lock("report:monthly", Duration::from_secs(30)).await?;
/// let taken = guard.acquisition();
/// tracing::info!(
///     confirmed = taken.confirmed(),
///     waited_ms = taken.waited().as_millis() as u64,
///     attempts = taken.attempts(),
///     "report lock taken"
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquisition {
    pub(crate) confirmed: usize,
    pub(crate) waited: Duration,
    pub(crate) attempts: u32,
}

impl Acquisition {
    /// A lock taken at the first attempt without waiting, as `held`'s
    /// acquisition confirmed it (the lock call adds the rest).
    pub(crate) fn first(held: &Held) -> Acquisition {
        Acquisition {
            confirmed: held.confirmed(),
            waited: Duration::ZERO,
            attempts: 1,
        }
    }

    /// Nodes that had confirmed when the attempt that took the lock ended:
    /// at least a majority, as the attempt does not wait for the others
    /// once it has one (on etcd or ZooKeeper, 1: the cluster answers as one).
    pub fn confirmed(&self) -> usize {
        self.confirmed
    }

    /// Time from the lock call to the lock being taken, waits and retries
    /// included.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Attempts the call made, the one that took the lock included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}
