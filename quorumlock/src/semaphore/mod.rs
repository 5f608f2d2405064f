//! A semaphore of K permits over the same stores as the locks: K locks,
//! one key per permit, so that every permit is exactly as safe as a lock.
//!
//! - this file: [`Semaphore`], its names and the sweep over the permits;
//! - [`permit`]: the holder's handle, [`Permit`] (a [`Guard`] and its index);
//! - [`waiting`]: [`Semaphore::acquire`]'s waiting, in the semaphore's
//!   hand-off queue on Redis, polling on etcd and ZooKeeper.
//!
//! Why not a counter: a per-node counter with a majority does not bound the
//! holders. With 3 nodes and 2 permits, holder A counts on nodes {1, 2},
//! B on {2, 3} and C on {1, 3}: each node counts 2, each holder has a
//! majority, and there are three holders. A permit that is a lock cannot be
//! counted twice: two holders of permit `i` would need two majorities of
//! the same key, which intersect (docs/how-it-works.md, "Semaphores").

pub(crate) mod permit;
mod waiting;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::redlock::wire::keys::{self, RESERVED_PREFIX};
use crate::client::Redlock;
use crate::error::{Error, Result, Setting};
use crate::lock::guard::Guard;
use crate::lock::resources::{MAX_RESOURCES, Resources};
use crate::random;

pub use self::permit::Permit;

/// Most permits one semaphore may have.
///
/// A sweep over busy permits costs one attempt each, and a release of
/// several permits at once (a multi-resource lock on them) is bounded like
/// any lock's ([`MAX_RESOURCES`]): 64 keeps both short.
/// A pool larger than that is better split (a semaphore per shard).
pub const MAX_PERMITS: usize = MAX_RESOURCES;

/// A distributed semaphore: at most `permits` holders at any instant, across
/// every process that uses the same name and permit count.
///
/// Each permit is a lock of its own (key `{name}:permit:<i>`, taken with
/// [`Redlock::try_lock`]), with everything a lock has: the quorum, the
/// watchdog's renewals, the loss signal and, with
/// [`LockOptions::fenced`](crate::LockOptions::fenced), fencing tokens (per
/// permit). An acquisition tries the permits one by one, starting at a
/// random one, and takes the first that is free. Made by
/// [`Redlock::semaphore`]; cheap to clone.
///
/// All users of one semaphore must give the same number of permits: a
/// client that counts more permits under the same name simply has more
/// keys to take.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::Redlock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// let redlock = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .build()?;
/// // Ten API keys, each good for one request at a time.
/// let keys = redlock.semaphore("llm-api-keys", 10)?;
/// let permit = keys.acquire(Duration::from_secs(30)).await?;
/// println!("calling the provider with key {}", permit.index());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    redlock: Redlock,
    name: Arc<str>,
    /// One lock per permit: `{name}:permit:<i>`.
    permits: Arc<[Resources]>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits.len())
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// A semaphore of `permits` permits named `name`, on this client's
    /// store and with its lock settings ([`LockOptions`](crate::LockOptions):
    /// wait, retry delay, auto-renewal, fencing). Sends nothing.
    ///
    /// The permits are the locks `{name}:permit:0` to
    /// `{name}:permit:<permits - 1>`. The braces make `name` their hash tag,
    /// so on a Redis Cluster member all permits (and their hand-off queue)
    /// share one hash slot. On Redis, the permits share one queue of waiters
    /// (`quorumlock:waiters:{name}:permits`): the release of any permit wakes
    /// the waiter at its head.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] ([`Setting::Semaphore`]) when `permits` is 0 or more
    /// than [`MAX_PERMITS`], or `name` is empty, contains `{` or `}` (the
    /// semaphore sets the hash tag itself) or lies in the reserved namespace
    /// ([`RESERVED_PREFIX`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use quorumlock::{Error, Redlock, Setting};
    ///
    /// # fn main() -> Result<(), Error> {
    /// let redlock = Redlock::builder().node("redis://127.0.0.1:6379").build()?;
    /// let pool = redlock.semaphore("report-workers", 4)?;
    /// assert_eq!(pool.permits(), 4);
    /// assert_eq!(pool.permit_name(3), "{report-workers}:permit:3");
    ///
    /// let zero = redlock.semaphore("report-workers", 0).unwrap_err();
    /// assert!(matches!(zero, Error::Config(ref e) if e.setting() == Setting::Semaphore));
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str, permits: usize) -> Result<Semaphore> {
        check_name(name)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::config(
                Setting::Semaphore,
                format!("a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"),
            ));
        }
        let permits = (0..permits)
            .map(|i| Resources::from(keys::permit(name, i)).validated())
            .collect::<Result<_>>()?;
        Ok(Semaphore {
            redlock: self.clone(),
            name: name.into(),
            permits,
        })
    }
}

fn check_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        "an empty semaphore name"
    } else if name.contains(['{', '}']) {
        "a semaphore name with `{` or `}`: the semaphore makes the name its permits' hash tag"
    } else if name.starts_with(RESERVED_PREFIX) {
        "a semaphore name in quorumlock's reserved namespace"
    } else {
        return Ok(());
    };
    Err(Error::config(Setting::Semaphore, format!("{problem}: {name:?}")))
}

/// What one sweep over the permits found.
enum Swept {
    Taken(Permit),
    /// Every permit refused; at least one was held by another owner. The
    /// last such refusal.
    Busy(Error),
    /// No permit was held by another owner, and none could be taken (the
    /// nodes failed): the last failure.
    Failed(Error),
}

impl Semaphore {
    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its number of permits.
    pub fn permits(&self) -> usize {
        self.permits.len()
    }

    /// The lock key of permit `index`: `{name}:permit:<index>`.
    ///
    /// # Panics
    ///
    /// When `index` is not below [`Semaphore::permits`].
    pub fn permit_name(&self, index: usize) -> &str {
        &self.permits[index].names()[0]
    }

    /// One sweep: tries each permit once, starting at a random one, and
    /// takes the first that is free.
    ///
    /// Returns `Ok(None)` when every permit is held (permits that failed on
    /// the nodes meanwhile count as held when any other permit was held by
    /// another owner: the semaphore is busy, not down).
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] (or [`Error::ValidityUsedUp`]) when no permit
    /// was held by another owner and none could be taken: an outage.
    /// [`Error::Config`] for a bad ttl (see [`Redlock::try_lock`]),
    /// [`Error::Closed`] after [`Redlock::shutdown`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Redlock::try_lock`]: the attempt in flight is undone.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Permit>> {
        match self.sweep(ttl).await? {
            Swept::Taken(permit) => Ok(Some(permit)),
            Swept::Busy(_) => Ok(None),
            Swept::Failed(error) => Err(error),
        }
    }

    /// Takes a permit, waiting until one is free or the client's wait
    /// ([`LockOptions::wait`](crate::LockOptions::wait)) or attempt budget
    /// ([`LockOptions::max_attempts`](crate::LockOptions::max_attempts),
    /// counted in sweeps) runs out.
    ///
    /// On Redis a waiter joins the semaphore's hand-off queue: the release
    /// of any permit wakes the waiter at its head, which sweeps again, so
    /// waiters are served in the order they came (a woken waiter that loses
    /// the race keeps its place) and do not poll. The retry delay stays underneath, for releases that announce
    /// nobody (expiry, other libraries). On etcd and ZooKeeper, whose lines
    /// are one per key, a waiter sweeps again after each retry delay.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`]: the last sweep's error when the budget runs out
    /// ([`Error::Held`] when permits were held by others).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the attempt in flight is undone and the waiter leaves
    /// the queues in the background.
    pub async fn acquire(&self, ttl: Duration) -> Result<Permit> {
        waiting::acquire(self, ttl).await
    }

    /// Tries every permit once from a random one (so that contenders spread
    /// over the permits instead of all queueing on permit 0).
    async fn sweep(&self, ttl: Duration) -> Result<Swept> {
        let k = self.permits.len();
        let start = random::below(k);
        let (mut busy, mut failed) = (None, None);
        for step in 0..k {
            let index = (start + step) % k;
            let resources = &self.permits[index];
            let redlock = &self.redlock;
            match redlock.backend.try_lock(&redlock.options, resources, ttl).await {
                Ok(guard) => return Ok(Swept::Taken(Permit::new(index, guard))),
                Err(held @ Error::Held { .. }) => busy = Some(held),
                Err(error @ (Error::Config(_) | Error::Closed)) => return Err(error),
                Err(error) => failed = Some(error),
            }
        }
        Ok(match (busy, failed) {
            (Some(held), _) => Swept::Busy(held),
            (None, Some(error)) => Swept::Failed(error),
            (None, None) => unreachable!("a semaphore has at least one permit"),
        })
    }
}

impl Permit {
    fn new(index: usize, guard: Guard) -> Permit {
        Permit { index, guard }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_names_share_the_semaphore_name_as_hash_tag() {
        use crate::backend::redlock::wire::keys::{queue, slot};
        let names: Vec<String> = (0..MAX_PERMITS).map(|i| keys::permit("pool", i)).collect();
        assert_eq!(names[7], "{pool}:permit:7");
        let first = slot(&names[0]);
        assert!(names.iter().all(|name| slot(name) == first));
        assert!(names.iter().all(|name| slot(&queue(name)) == first));
    }

    #[test]
    fn bad_names_are_refused() {
        for name in ["", "{x}", "a}b", "quorumlock:pool"] {
            let error = check_name(name).unwrap_err();
            assert!(
                matches!(error, Error::Config(ref e) if e.setting() == Setting::Semaphore),
                "{name:?}"
            );
        }
        assert!(check_name("pool:eu-1").is_ok());
    }
}
