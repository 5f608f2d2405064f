//! An idempotency key's run, with the operation in Python.
//!
//! The library's `Idempotency::run` claims the key, runs the operation if
//! this caller owns it, and stores its result for the others. Here the
//! operation is a Python callable, so the run is a task on the runtime that
//! stops where the operation goes and asks Python for it: `next()` answers
//! either "run it now" or the result stored by whoever ran it; after
//! running it, Python hands over the outcome (`succeed` / `fail`) and calls
//! `next()` again for the stored result.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use quorumlock::{Idempotency, IdempotencyError};
use tokio::sync::{Mutex, oneshot};
use tokio::task::JoinHandle;

use crate::awaitable;
use crate::errors::{Failure, Reply};
use crate::runtime;

/// The operation's outcome, as Python hands it over.
type Outcome = Result<Vec<u8>, String>;

/// The run's state between Python's calls.
struct State {
    /// Fires when this caller owns the key and must run the operation.
    start: Option<oneshot::Receiver<()>>,
    /// Takes the operation's outcome.
    outcome: Option<oneshot::Sender<Outcome>>,
    /// The library's run: the stored result, or why there is none.
    task: Option<JoinHandle<Result<Vec<u8>, IdempotencyError>>>,
}

/// What `next()` says.
enum Step {
    /// Run the operation now, then hand over its outcome.
    Run,
    /// The result stored under the key.
    Done(Vec<u8>),
}

impl<'py> IntoPyObject<'py> for Step {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Step::Run => Ok(py.None().into_bound(py)),
            Step::Done(bytes) => Ok(PyBytes::new(py, &bytes).into_any()),
        }
    }
}

/// An idempotency key's run (made by `Client.idempotency`).
#[pyclass(frozen, module = "quorumlock._quorumlock")]
pub struct Run {
    state: Arc<Mutex<State>>,
}

impl Run {
    /// Starts the library's run of `key` on the runtime.
    pub fn start(jobs: Idempotency, key: String, ttl: Duration) -> PyResult<Run> {
        let (start_tx, start_rx) = oneshot::channel::<()>();
        let (outcome_tx, outcome_rx) = oneshot::channel::<Outcome>();
        let task = runtime::handle()?.spawn(async move {
            jobs.run(&key, ttl, move || async move {
                let _ = start_tx.send(());
                match outcome_rx.await {
                    Ok(Ok(bytes)) => Ok(bytes),
                    Ok(Err(message)) => Err(message),
                    Err(_) => Err("the operation was abandoned: its caller was cancelled".to_owned()),
                }
            })
            .await
        });
        Ok(Run {
            state: Arc::new(Mutex::new(State {
                start: Some(start_rx),
                outcome: Some(outcome_tx),
                task: Some(task),
            })),
        })
    }
}

async fn next(state: Arc<Mutex<State>>) -> Result<Step, Failure> {
    let mut state = state.lock().await;
    let Some(mut task) = state.task.take() else {
        return Err(Failure::Runtime("the idempotency run has ended".to_owned()));
    };
    if let Some(mut start) = state.start.take() {
        tokio::select! {
            started = &mut start => {
                if started.is_ok() {
                    state.task = Some(task);
                    return Ok(Step::Run);
                }
                // The run ended without calling the operation.
            }
            joined = &mut task => return finished(joined),
        }
    }
    finished(task.await)
}

fn finished(
    joined: Result<Result<Vec<u8>, IdempotencyError>, tokio::task::JoinError>,
) -> Result<Step, Failure> {
    let result = joined.map_err(|e| Failure::Runtime(format!("the idempotency task failed: {e}")))?;
    Ok(Step::Done(result?))
}

#[pymethods]
impl Run {
    /// `None`: run the operation now (then `succeed` or `fail`, and `next`
    /// again); bytes: the result stored under the key. Raises as the run
    /// fails (`IdempotencyInProgress`, `CachedFailure`, ...).
    fn next<'py>(&self, py: Python<'py>, blocking: bool) -> PyResult<Bound<'py, PyAny>> {
        let state = Arc::clone(&self.state);
        if blocking {
            let outcome = runtime::block_on(py, next(state))?;
            return Reply(outcome).into_pyobject(py);
        }
        awaitable::awaitable(py, async move { Ok(Reply(next(state).await)) })
    }

    /// The operation returned `result`: store it for every caller.
    fn succeed(&self, result: Vec<u8>) {
        self.hand_over(Ok(result));
    }

    /// The operation raised: `message` says what (cached for the other
    /// callers only with `cache_failures`).
    fn fail(&self, message: String) {
        self.hand_over(Err(message));
    }
}

impl Run {
    fn hand_over(&self, outcome: Outcome) {
        // `try_lock`: `next` holds the lock only while it waits, and
        // Python calls this between two `next`s.
        if let Ok(mut state) = self.state.try_lock()
            && let Some(sender) = state.outcome.take()
        {
            let _ = sender.send(outcome);
        }
    }
}
