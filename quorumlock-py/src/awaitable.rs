//! Asyncio awaitables for the runtime's futures.
//!
//! An awaitable is an `asyncio.Future` of the running loop, and its Rust
//! future one task on the runtime. The task hands its outcome to the loop
//! through the loop's completion queue: it pushes the outcome and, if the
//! queue was empty, writes one byte to a socket that the loop watches
//! (`loop.add_reader`). The loop's reader callback then takes every queued
//! outcome and resolves the futures, on the loop's thread, with the GIL it
//! already holds.
//!
//! So a result costs one write from the runtime's thread and one wake-up of
//! the loop, and the runtime's threads never take the GIL. The usual
//! bridge (pyo3-async-runtimes) spawns two tasks per call and hands each
//! result to a blocking-pool thread that takes the GIL to call
//! `loop.call_soon_threadsafe`: about 100 µs more per awaited call on a
//! 2-vCPU machine, and a sixth of the throughput of 64 tasks, whose
//! results queued for the GIL (docs/benchmarks.md, "Python").
//!
//! Cancelling the awaitable aborts the task, which drops the Rust future at
//! its next await (as cancelling a Tokio task does).

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::{errors, runtime};

/// Makes a call's Python result or exception, with the GIL, on the loop's
/// thread.
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// An outcome on its way to the loop, with the future it resolves.
struct Completion {
    future: Py<PyAny>,
    outcome: Outcome,
}

/// What the runtime's tasks and one loop's reader callback share.
struct Queue {
    /// The outcomes not yet taken by the loop. A byte was written for them
    /// exactly when this is not empty: the first push after a take writes
    /// it, and the loop's callback takes them all.
    outcomes: Mutex<Vec<Completion>>,
    /// The loop watches this end; a byte means "outcomes are queued".
    readable: UnixStream,
    /// The tasks write the byte here.
    writable: UnixStream,
}

impl Queue {
    fn new() -> std::io::Result<Queue> {
        let (readable, writable) = UnixStream::pair()?;
        readable.set_nonblocking(true)?;
        writable.set_nonblocking(true)?;
        Ok(Queue {
            outcomes: Mutex::default(),
            readable,
            writable,
        })
    }

    fn outcomes(&self) -> MutexGuard<'_, Vec<Completion>> {
        self.outcomes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues an outcome (from a runtime thread, without the GIL) and wakes
    /// the loop if nothing was queued.
    fn push(&self, completion: Completion) {
        let signal = {
            let mut outcomes = self.outcomes();
            outcomes.push(completion);
            outcomes.len() == 1
        };
        if signal {
            // One byte at most is unread, so the socket's buffer never
            // fills. A loop that is gone has nobody to tell.
            let _ = (&self.writable).write(&[1]);
        }
    }

    /// Takes what is queued (on the loop's thread).
    fn take(&self) -> Vec<Completion> {
        let mut byte = [0u8; 1];
        // Read before taking: an outcome queued after the take writes a
        // new byte, and the loop calls back again.
        let _ = (&self.readable).read(&mut byte);
        std::mem::take(&mut *self.outcomes())
    }
}

/// A loop's reader callback: resolves the futures whose outcomes came.
#[pyclass(frozen, module = "quorumlock._quorumlock")]
struct Deliver(Arc<Queue>);

#[pymethods]
impl Deliver {
    fn __call__(&self, py: Python<'_>) {
        for completion in self.0.take() {
            // One future that cannot take its result (its loop is closing)
            // must not keep the others from theirs.
            if let Err(error) = resolve(py, completion) {
                error.write_unraisable(py, None);
            }
        }
    }
}

/// Sets a future's result or exception, unless it was cancelled meanwhile.
fn resolve(py: Python<'_>, completion: Completion) -> PyResult<()> {
    let future = completion.future.bind(py);
    if future.call_method0(pyo3::intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    match (completion.outcome)(py) {
        Ok(value) => future.call_method1(pyo3::intern!(py, "set_result"), (value,))?,
        Err(error) => future.call_method1(pyo3::intern!(py, "set_exception"), (error.into_value(py),))?,
    };
    Ok(())
}

/// The done callback of an awaitable: aborts its task when it is cancelled.
#[pyclass(frozen, module = "quorumlock._quorumlock")]
struct AbortOnCancel(tokio::task::AbortHandle);

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future
            .call_method0(pyo3::intern!(future.py(), "cancelled"))?
            .is_truthy()?
        {
            self.0.abort();
        }
        Ok(())
    }
}

/// The completion queue of `event_loop`, made and registered with the loop
/// (`add_reader`) the first time a call on it needs one. Kept in a weak
/// dictionary: a loop that is collected takes its queue along.
fn queue_of(event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Queue>> {
    static QUEUES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = event_loop.py();
    let queues = QUEUES
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("weakref")?
                    .getattr("WeakKeyDictionary")?
                    .call0()?
                    .unbind(),
            )
        })?
        .bind(py);
    if let Ok(deliver) = queues
        .call_method1(pyo3::intern!(py, "get"), (event_loop,))?
        .cast_into::<Deliver>()
    {
        return Ok(Arc::clone(&deliver.get().0));
    }
    let queue = Arc::new(
        Queue::new()
            .map_err(|e| errors::runtime(format!("cannot make the event loop's completion queue: {e}")))?,
    );
    let deliver = Bound::new(py, Deliver(Arc::clone(&queue)))?;
    event_loop.call_method1(
        pyo3::intern!(py, "add_reader"),
        (queue.readable.as_raw_fd(), &deliver),
    )?;
    queues.set_item(event_loop, deliver)?;
    Ok(queue)
}

/// An asyncio awaitable (a future of the running loop) for `future`, run on
/// the runtime.
pub fn awaitable<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let handle = runtime::handle()?;
    let event_loop = GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
        })?
        .bind(py)
        .call0()?;
    let queue = queue_of(&event_loop)?;
    let py_future = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let target = py_future.clone().unbind();
    let task = handle.spawn(async move {
        // A panic becomes the awaitable's exception: an awaitable that
        // never completes would hang its caller.
        let outcome = AssertUnwindSafe(future).catch_unwind().await;
        queue.push(Completion {
            future: target,
            outcome: Box::new(move |py| match outcome {
                Ok(outcome) => outcome.and_then(|value| value.into_py_any(py)),
                Err(panic) => Err(errors::runtime(format!(
                    "quorumlock panicked: {}",
                    panic_message(&*panic)
                ))),
            }),
        });
    });
    py_future.call_method1(
        pyo3::intern!(py, "add_done_callback"),
        (AbortOnCancel(task.abort_handle()),),
    )?;
    Ok(py_future)
}

/// What a panic said, if it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message
    } else {
        "(no message)"
    }
}
