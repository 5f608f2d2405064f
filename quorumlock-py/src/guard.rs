//! `Guard`: a held lock (or a semaphore's permit) for Python.
//!
//! The library's guard sits behind an async mutex, taken by `extend` and by
//! `release`; what never changes (token, fence, names) is copied out, and
//! the validity is read through a [`LockWatch`], so that reading it never
//! waits for an `extend` in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pyo3::prelude::*;
use quorumlock::{Error, LockWatch, Permit, ReleaseReport};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::awaitable;
use crate::convert;
use crate::errors::{Failure, Reply};
use crate::runtime::{self, Process};
use crate::value::Value;

/// What a guard holds: a lock, or a permit of a semaphore.
pub enum Held {
    Lock(quorumlock::Guard),
    Permit(Permit),
}

impl Held {
    fn guard(&self) -> &quorumlock::Guard {
        match self {
            Held::Lock(guard) => guard,
            Held::Permit(permit) => permit.guard(),
        }
    }

    fn guard_mut(&mut self) -> &mut quorumlock::Guard {
        match self {
            Held::Lock(guard) => guard,
            Held::Permit(permit) => permit.guard_mut(),
        }
    }

    async fn release(self) -> quorumlock::Result<ReleaseReport> {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Permit(permit) => permit.release().await,
        }
    }
}

/// A held lock, or a permit of a semaphore (then `index` is its place).
///
/// Renewed in the background while held; `is_held()` turns false and
/// `lost()` completes when the lock is lost. `release()` gives it back
/// (again: nothing). A guard that Python collects unreleased is released
/// in the background.
#[pyclass(frozen, module = "quorumlock._quorumlock")]
pub struct Guard {
    held: Arc<Mutex<Option<Held>>>,
    watch: LockWatch,
    token: String,
    fence: Option<u64>,
    resources: Vec<String>,
    index: Option<usize>,
    /// `release` was called: a lock no longer held is then not lost.
    released: AtomicBool,
    /// Nodes of the client and its quorum, for the `LockLost` of `check`.
    nodes: usize,
    quorum: usize,
    process: Process,
}

impl Guard {
    pub fn new(held: Held, nodes: usize, quorum: usize, process: Process) -> Guard {
        let guard = held.guard();
        let index = match &held {
            Held::Lock(_) => None,
            Held::Permit(permit) => Some(permit.index()),
        };
        Guard {
            watch: guard.watch(),
            token: guard.token().to_owned(),
            fence: guard.fence_token(),
            resources: guard.resources().to_vec(),
            index,
            released: AtomicBool::new(false),
            nodes,
            quorum,
            process,
            held: Arc::new(Mutex::new(Some(held))),
        }
    }

    fn lost_error(&self, confirmed: usize) -> Failure {
        Failure::Lock(Error::Lost {
            confirmed,
            quorum: self.quorum,
            nodes: self.nodes,
        })
    }
}

fn release_report(report: &ReleaseReport) -> Value {
    let kept_for = report
        .kept_until
        .map(|until| until.saturating_duration_since(Instant::now()));
    Value::Dict(vec![
        ("nodes", Value::count(report.nodes)),
        ("confirmed", Value::count(report.confirmed)),
        ("deleted", Value::count(report.deleted)),
        ("kept", Value::count(report.kept)),
        ("kept_for", kept_for.map_or(Value::None, Value::seconds)),
    ])
}

#[pymethods]
impl Guard {
    /// The owner token stored on every node.
    #[getter]
    fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token (an int that grows with every holder), or `None`
    /// when the lock was taken without `fenced=True`.
    #[getter]
    fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// The names locked.
    #[getter]
    fn resources(&self) -> Vec<String> {
        self.resources.clone()
    }

    /// The permit's place (0 to permits - 1) for a semaphore's permit;
    /// `None` for a lock.
    #[getter]
    fn index(&self) -> Option<usize> {
        self.index
    }

    /// Seconds of validity left: the lock is trustworthy only this long
    /// unless renewed (0.0 once lost or run out).
    #[getter]
    fn remaining(&self) -> f64 {
        if self.watch.is_held() {
            self.watch.remaining().as_secs_f64()
        } else {
            0.0
        }
    }

    /// Whether the lock is still held: not lost, not released, within its
    /// validity.
    fn is_held(&self) -> bool {
        self.watch.is_held()
    }

    /// Whether `release()` was called.
    #[getter]
    fn released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Raises `LockLost` when the lock was lost (not when it was released).
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        if self.watch.is_held() || self.released.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(self.lost_error(0).into_pyerr(py))
    }

    /// An awaitable that completes when the lock is lost (never for a
    /// release: cancel it then).
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let watch = self.watch.clone();
        awaitable::awaitable(py, async move {
            watch.lost().await;
            Ok(())
        })
    }

    /// Blocks until the lock is lost or `timeout` seconds pass (`None`: no
    /// limit); returns whether it was lost.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let limit = convert::optional_duration(timeout, "timeout")?;
        let watch = self.watch.clone();
        runtime::block_on(py, async move {
            match limit {
                Some(limit) => tokio::time::timeout(limit, watch.lost()).await.is_ok(),
                None => {
                    watch.lost().await;
                    true
                }
            }
        })
    }

    /// Extends the lock to `ttl` from now on every node (raises `LockLost`
    /// when no majority still holds it).
    fn extend<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        ttl: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.process.check(py)?;
        let ttl: Duration = convert::duration(ttl, "ttl")?;
        let held = Arc::clone(&self.held);
        let lost = self.lost_error(0);
        let future = async move {
            let mut slot = held.lock().await;
            let Some(held) = slot.as_mut() else {
                return Err(lost);
            };
            held.guard_mut().extend(ttl).await?;
            Ok(())
        };
        if blocking {
            let outcome = runtime::block_on(py, future)?;
            return Reply(outcome).into_pyobject(py);
        }
        awaitable::awaitable(py, async move { Ok(Reply(future.await)) })
    }

    /// Releases the lock on every node and returns the release report;
    /// `None` when it was released before. Runs to its end in the
    /// background even when the call is cancelled or interrupted.
    fn release<'py>(&self, py: Python<'py>, blocking: bool) -> PyResult<Bound<'py, PyAny>> {
        self.released.store(true, Ordering::Release);
        let held = Arc::clone(&self.held);
        let in_parent = self.process.is_current();
        let future = async move {
            let Some(held) = held.lock().await.take() else {
                return Reply(Ok(Value::None));
            };
            if !in_parent {
                // The parent's lock: its renewal and release are the parent's.
                std::mem::forget(held);
                return Reply(Ok(Value::None));
            }
            Reply(
                held.release()
                    .await
                    .map(|r| release_report(&r))
                    .map_err(Failure::from),
            )
        };
        let task = runtime::handle()?.spawn(future);
        let outcome = async move {
            task.await
                .map_err(|e| crate::errors::runtime(format!("the release task failed: {e}")))
        };
        if blocking {
            return runtime::block_on(py, outcome)??.into_pyobject(py);
        }
        awaitable::awaitable(py, outcome)
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a quorumlock guard cannot be pickled: the lock belongs to this process",
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "<quorumlock Guard {:?} held={} fence={:?}>",
            self.resources,
            self.watch.is_held(),
            self.fence
        )
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(held) = self.held.try_lock().ok().and_then(|mut slot| slot.take()) else {
            // Released, or a call in flight owns it and drops it on the
            // runtime when done.
            return;
        };
        if !self.process.is_current() {
            // A forked child's copy of the parent's lock: the parent renews
            // and releases it. Dropping it here would send the release over
            // connections the child shares with the parent.
            std::mem::forget(held);
            return;
        }
        // The library's drop sends the release in the background on the
        // current runtime: enter it (Python's collector runs anywhere).
        match runtime::handle() {
            Ok(handle) => {
                let _entered = handle.enter();
                drop(held);
            }
            Err(_) => drop(held),
        }
    }
}
