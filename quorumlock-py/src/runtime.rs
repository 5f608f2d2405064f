//! The Tokio runtime the locks live on, one per process, and the bridge
//! that turns its futures into asyncio awaitables.
//!
//! Everything of the library runs here: acquisitions, the watchdog's
//! renewals, releases, the connections' I/O. Its worker threads never take
//! the GIL (pyo3-async-runtimes hands a result to Python from the blocking
//! pool), so an event loop or a thread that keeps the GIL busy delays only
//! the moment Python hears of a result, never a renewal.
//!
//! A runtime's threads do not survive `fork()`: the child has the memory of
//! the parent's runtime and none of its threads, so anything waiting on
//! them would hang. The slot remembers the process that built the runtime;
//! a child builds a fresh one the first time it needs one (and leaks the
//! parent's copy, whose threads it cannot join). Clients made in the parent
//! refuse to work in the child ([`Process::check`]): their connections and
//! renewals belong to the parent.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{self, ContextExt};
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

/// An asyncio awaitable for `future`, run on the runtime. Cancelling the
/// awaitable drops the future (as cancelling a Tokio task does).
pub fn awaitable<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    handle()?;
    generic::future_into_py::<LockRuntime, F, T>(py, future)
}

/// pyo3-async-runtimes over this module's runtime.
struct LockRuntime;

tokio::task_local! {
    /// The asyncio loop (and context) of the call a task serves.
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

/// A task of the runtime, as pyo3-async-runtimes awaits it.
struct Task(tokio::task::JoinHandle<()>);

impl Future for Task {
    type Output = Result<(), TaskFailed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map_err(TaskFailed)
    }
}

/// A task that panicked or was aborted.
struct TaskFailed(tokio::task::JoinError);

impl generic::JoinError for TaskFailed {
    fn is_panic(&self) -> bool {
        self.0.is_panic()
    }

    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        self.0.into_panic()
    }
}

impl generic::Runtime for LockRuntime {
    type JoinError = TaskFailed;
    type JoinHandle = Task;

    fn spawn<F>(future: F) -> Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // The callers above built the runtime first: `handle` fails only
        // where they already raised.
        let handle = handle().expect("the runtime was built by the caller");
        Task(handle.spawn(future))
    }

    fn spawn_blocking<F>(work: F) -> Task
    where
        F: FnOnce() + Send + 'static,
    {
        let handle = handle().expect("the runtime was built by the caller");
        Task(handle.spawn_blocking(work))
    }
}

impl ContextExt for LockRuntime {
    fn scope<F, R>(locals: TaskLocals, future: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, future))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|cell| cell.get().cloned())
            .unwrap_or_default()
    }
}
