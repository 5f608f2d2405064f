//! [`LockWatch`]: what a held lock's validity is, readable without the
//! guard.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::state::Held;

/// A read-only view of a held lock's validity, apart from its
/// [`Guard`](crate::Guard): whether it is still held, until when, and its
/// loss as a future.
///
/// The guard is the lock (extend and release take it by `&mut` and by
/// value); a watch is only the view, cheap to clone and `'static`, for the
/// code that must stop when the lock is lost while the guard is owned
/// elsewhere: a spawned task, a progress reporter, a binding to another
/// language. It says what [`Guard::is_held`](crate::Guard::is_held),
/// [`Guard::remaining`](crate::Guard::remaining) and
/// [`Guard::lost`](crate::Guard::lost) say, also after the guard is gone
/// (a released lock is no longer held).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
/// let guard = redlock.lock("report:7", Duration::from_secs(30)).await?;
/// let watch = guard.watch();
/// let work = tokio::spawn(async move {
///     tokio::select! {
///         () = watch.lost() => Err("lock lost: the report is incomplete"),
///         () = async { /* write the report */ } => Ok(()),
///     }
/// });
/// let outcome = work.await.expect("the task ran");
/// guard.release().await?;
/// # let _ = outcome;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockWatch {
    held: Arc<Held>,
}

impl LockWatch {
    pub(crate) fn new(held: Arc<Held>) -> LockWatch {
        LockWatch { held }
    }

    /// Whether the lock is still held: not lost, no release begun, and
    /// within its validity.
    pub fn is_held(&self) -> bool {
        !self.held.is_releasing() && self.held.is_held()
    }

    /// The instant the lock stops being trustworthy unless renewed.
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until()
    }

    /// The validity left (zero once it has run out).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Completes when the lock is lost or its validity runs out (not when
    /// it is released).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future changes nothing.
    pub async fn lost(&self) {
        self.held.lost().await;
    }
}

impl fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockWatch")
            .field("resources", &self.held.resources.names())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
