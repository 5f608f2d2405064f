//! The fixture the suite runs on: a [`Store`] (what a backend's test
//! servers offer the suite), a [`Space`] of one test on it, and the store
//! the binary's tests share.
//!
//! Most tests share one started store per store type and binary: starting
//! one is most of a short test's time (a ZooKeeper server is a JVM), and
//! the tests cannot see each other there, as each test's clients lock in a
//! namespace of their own (an etcd key prefix, a ZooKeeper chroot) and its
//! assertions look only inside it. A test that pauses or kills members
//! starts a store of its own ([`Space::own`]).

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::consensus_chaos::Members;

use super::WAIT;

/// A consensus store as the suite needs it: the test kit's servers
/// ([`Members`]: start, pause, kill), a look at what a lock left in them,
/// and the store's own figures where its promises differ in degree.
pub trait Store: Members {
    /// The store's name, for messages.
    const NAME: &'static str;

    /// What the URL of a client with the tests' short session adds (a
    /// ZooKeeper session of 2 s: a dead client's lock lasts that long, and a
    /// cut-off holder is told of the loss within two thirds of it).
    const SHORT_SESSION_QUERY: &'static str;

    /// A ttl to `extend` a lock of [`TTL`](super::TTL) to.
    const EXTEND_TO: Duration;

    /// The validity that extending to [`Store::EXTEND_TO`] leaves at least:
    /// beyond the lock's ttl where the store keeps what it is asked for (an
    /// etcd lease), within what the session vouches for on ZooKeeper.
    const LEFT_AFTER_EXTEND: Duration;

    /// How long past the end of a minimum hold the store may still keep the
    /// lock (an etcd lease counts whole seconds), or `None` where a minimum
    /// hold is refused (a ZooKeeper lock's nodes end with its session).
    const MIN_HOLD_SLACK: Option<Duration>;

    /// Where `resource` of the namespace `space` lives, as the store's own
    /// tools name it (`etcdctl lock`, kazoo's `Lock`).
    fn resource_path(space: &str, resource: &str) -> String;

    /// The entries (keys, nodes) in the line of the resource at `path`:
    /// its holder's and its waiters', sorted by name (not in line order).
    fn line(&self, path: &str) -> Vec<String>;

    /// Every lock entry left anywhere in the namespace `space`.
    fn leftovers(&self, space: &str) -> Vec<String>;

    /// Deletes `entry` (as [`Store::line`] names it) of the resource at
    /// `path`, behind its client's back (an operator, a lapsed lease).
    fn remove(&self, path: &str, entry: &str);
}

/// One test's namespace on a store: its clients, and what they left there.
pub struct Space<S: Store> {
    store: Arc<S>,
    name: String,
}

impl<S: Store> Space<S> {
    /// A namespace of its own, named after `what` the test does, on the
    /// store this binary's tests share (one member).
    pub fn shared(what: &str) -> Space<S> {
        Space::on(shared_store(), what)
    }

    /// A namespace on a store of `members` members of its own, for a test
    /// that pauses or kills them.
    pub fn own(members: usize, what: &str) -> Space<S> {
        Space::on(Arc::new(S::start(members)), what)
    }

    /// A namespace named after `what` on `store`.
    fn on(store: Arc<S>, what: &str) -> Space<S> {
        // Unique in the binary whatever the callers pass.
        static SPACES: AtomicUsize = AtomicUsize::new(0);
        let n = SPACES.fetch_add(1, Ordering::Relaxed);
        let name = format!("{what}-{n}");
        Space { store, name }
    }

    /// The store's servers.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The namespace's name (its etcd prefix, its ZooKeeper chroot).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of a client with the tests' short session in this namespace.
    pub fn url(&self) -> String {
        format!("{}{}", self.steady_url(), S::SHORT_SESSION_QUERY)
    }

    /// The URL of a client with the store's default session.
    pub fn steady_url(&self) -> String {
        format!("{}/{}", self.store.url(), self.name)
    }

    /// A client with the tests' short session (see
    /// [`Store::SHORT_SESSION_QUERY`]), waiting up to [`WAIT`].
    pub fn client(&self) -> Redlock {
        client(&self.url())
    }

    /// A client with the store's default session (ZooKeeper's 10 s), for a
    /// holder that must keep its lock while the test looks at the store:
    /// with the tests' 2 s session a loaded machine (two copies of the
    /// suite and their JVMs on two cores) can hold heartbeats up past the
    /// 1.3 s they vouch for, and the lock is lost, as it must be. Take its
    /// locks with [`HOLD`](super::HOLD).
    pub fn steady(&self) -> Redlock {
        client(&self.steady_url())
    }

    /// Where `resource` lives in the store (see [`Store::resource_path`]).
    pub fn path(&self, resource: &str) -> String {
        S::resource_path(&self.name, resource)
    }

    /// The entries in the line of `resource`.
    pub fn line(&self, resource: &str) -> Vec<String> {
        self.store.line(&self.path(resource))
    }

    /// Every lock entry left in the namespace.
    pub fn leftovers(&self) -> Vec<String> {
        self.store.leftovers(&self.name)
    }

    /// Deletes `entry` of `resource`'s line behind its client's back.
    pub fn remove(&self, resource: &str, entry: &str) {
        self.store.remove(&self.path(resource), entry);
    }
}

/// A client on `url`, waiting up to [`WAIT`].
fn client(url: &str) -> Redlock {
    Redlock::builder()
        .node(url)
        .wait(WAIT)
        .build()
        .expect("a consensus store client")
}

/// The stores the binary's tests share, one per store type, each in a
/// cell of its own so that starting one does not hold up the others.
static SHARED: Mutex<Vec<Arc<dyn Any + Send + Sync>>> = Mutex::new(Vec::new());

/// The shared store of type `S`, started by the first test that asks for
/// it and stopped when the process exits.
fn shared_store<S: Store>() -> Arc<S> {
    let cell = {
        let mut cells = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if cells.is_empty() {
            stop_shared_stores_at_exit();
        }
        let found = cells
            .iter()
            .find_map(|cell| Arc::clone(cell).downcast::<OnceLock<Arc<S>>>().ok());
        found.unwrap_or_else(|| {
            let cell = Arc::new(OnceLock::new());
            cells.push(Arc::clone(&cell) as Arc<dyn Any + Send + Sync>);
            cell
        })
    };
    Arc::clone(cell.get_or_init(|| Arc::new(S::start(1))))
}

/// Has the C runtime drop the shared stores when the test binary exits
/// (the harness returns from `main` or calls `exit` once every test has
/// run): a static is never dropped, and its servers would outlive the run.
fn stop_shared_stores_at_exit() {
    extern "C" fn stop() {
        // Every test has returned its handle by now: these are the last.
        SHARED.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
    // SAFETY: `stop` takes no arguments and does not unwind (dropping a
    // test kit cluster kills and reaps its processes, ignoring errors).
    let registered = unsafe { libc::atexit(stop) };
    assert_eq!(registered, 0, "atexit refused the shared stores' cleanup");
}
