//! The Tokio runtime the locks live on, one per process, and blocking calls
//! on it (asyncio awaitables are `awaitable`'s).
//!
//! Everything of the library runs here: acquisitions, the watchdog's
//! renewals, releases, the connections' I/O. Its worker threads never take
//! the GIL, so an event loop or a thread that keeps the GIL busy delays only
//! the moment Python hears of a result, never a renewal.
//!
//! A runtime's threads do not survive `fork()`: the child has the memory of
//! the parent's runtime and none of its threads, so anything waiting on
//! them would hang. The slot remembers the process that built the runtime;
//! a child builds a fresh one the first time it needs one (and leaks the
//! parent's copy, whose threads it cannot join). Clients made in the parent
//! refuse to work in the child ([`Process::check`]): their connections and
//! renewals belong to the parent.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Handle;

use crate::errors::{self, Failure};

/// Worker threads of the runtime. The work is a few round trips per renewal
/// period and per lock call; two keep one slow task from delaying the rest.
const WORKER_THREADS: usize = 2;

/// How often a blocking call wakes to let Python handle a signal (Ctrl-C
/// raises `KeyboardInterrupt` within this long, and the call's future is
/// dropped, which gives back whatever it had taken).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The process's runtime: its handle and the process it was built in.
static RUNTIME: Mutex<Option<(u32, Handle)>> = Mutex::new(None);

/// The runtime of this process, built on first use (and again in a forked
/// child).
pub fn handle() -> PyResult<Handle> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((built_in, handle)) = slot.as_ref()
        && *built_in == pid
    {
        return Ok(handle.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name("quorumlock")
        .enable_all()
        .build()
        .map_err(|e| errors::runtime(format!("cannot start the lock runtime: {e}")))?;
    let handle = runtime.handle().clone();
    // Lives as long as the process: Python may release a guard at exit,
    // and a forked child must never drop (join) its parent's copy.
    std::mem::forget(runtime);
    *slot = Some((pid, handle.clone()));
    Ok(handle)
}

/// The process a client was made in.
#[derive(Clone, Copy, Debug)]
pub struct Process(u32);

impl Process {
    /// This process.
    pub fn current() -> Process {
        Process(std::process::id())
    }

    /// `Ok` in the process the client was made in; in a forked child, the
    /// error that says to make a new client there.
    pub fn check(self, py: Python<'_>) -> PyResult<()> {
        let now = std::process::id();
        if now == self.0 {
            return Ok(());
        }
        Err(Failure::Closed(format!(
            "this client was made in process {} and this is process {now}, a fork of it: its \
             connections and renewals stay with the parent. Make a new client in each process \
             (with gunicorn --preload, in a post_fork hook or the app's lifespan)",
            self.0
        ))
        .into_pyerr(py))
    }

    /// Whether this is the process the client was made in.
    pub fn is_current(self) -> bool {
        std::process::id() == self.0
    }
}

/// Runs `future` on the runtime from a thread outside it, with the GIL
/// released, waking every [`SIGNAL_CHECK`] for Python's signal handlers:
/// an exception from one (`KeyboardInterrupt`) drops the future and is
/// raised.
pub fn block_on<F>(py: Python<'_>, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let handle = handle()?;
    let mut future = std::pin::pin!(future);
    loop {
        let step =
            py.detach(|| handle.block_on(async { tokio::time::timeout(SIGNAL_CHECK, &mut future).await }));
        match step {
            Ok(output) => return Ok(output),
            Err(_) => py.check_signals()?,
        }
    }
}
