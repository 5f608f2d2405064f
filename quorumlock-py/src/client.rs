//! `Client`: the library's `Redlock` for Python. Every call takes `blocking`
//! first: `True` runs it on the calling thread with the GIL released
//! (the sync `quorumlock.Redlock`), `False` returns an asyncio awaitable
//! (`quorumlock.asyncio.Redlock`). Both clients of the Python layer are
//! this one type.

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use quorumlock::{LockOptions, Redlock, ReplicaAck, ShutdownReport};

use crate::awaitable;
use crate::convert::{self, optional_duration};
use crate::errors::{self, Failure, Reply};
use crate::guard::{Guard, Held};
use crate::inspect;
use crate::runtime::{self, Process};
use crate::value::Value;

/// A distributed lock client over Redis nodes (Redlock), an etcd cluster or
/// a ZooKeeper ensemble. Made by `quorumlock.Redlock` and
/// `quorumlock.asyncio.Redlock`.
#[pyclass(frozen, module = "quorumlock._quorumlock")]
pub struct Client {
    redlock: Redlock,
    process: Process,
}

/// Runs `future` as the caller asked: on this thread (blocking) or as an
/// asyncio awaitable.
fn run<'py, T, F>(py: Python<'py>, blocking: bool, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    if blocking {
        let outcome = runtime::block_on(py, future)?;
        return Reply(outcome).into_pyobject(py);
    }
    awaitable::awaitable(py, async move { Ok(Reply(future.await)) })
}

/// The keyword arguments a lock call takes on top of the client's settings.
fn lock_options(base: LockOptions, options: Option<&Bound<'_, PyDict>>) -> PyResult<LockOptions> {
    let Some(options) = options else {
        return Ok(base);
    };
    let mut out = base;
    for (key, value) in options.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        let py = value.py();
        out = match key.as_str() {
            "wait" => out.wait(convert::duration(&value, "wait")?),
            "retry_delay" => out.retry_delay(convert::duration(&value, "retry_delay")?),
            "min_validity" => out.min_validity(convert::duration(&value, "min_validity")?),
            "min_hold" => out.min_hold(convert::duration(&value, "min_hold")?),
            "max_hold" => out.max_hold(convert::duration(&value, "max_hold")?),
            "max_attempts" => out.max_attempts(count(&value, "max_attempts")?),
            "max_renewals" => out.max_renewals(count(&value, "max_renewals")?),
            "auto_renew" => out.auto_renew(flag(&value, "auto_renew")?),
            "fenced" => out.fenced(flag(&value, "fenced")?),
            other => {
                return Err(errors::config(
                    py,
                    other,
                    format!("unknown lock setting {other:?}"),
                ));
            }
        };
    }
    Ok(out)
}

fn count(value: &Bound<'_, PyAny>, setting: &str) -> PyResult<u32> {
    value.extract().map_err(|_| {
        errors::config(
            value.py(),
            setting,
            format!("{setting} must be a non-negative int"),
        )
    })
}

fn flag(value: &Bound<'_, PyAny>, setting: &str) -> PyResult<bool> {
    value
        .extract()
        .map_err(|_| errors::config(value.py(), setting, format!("{setting} must be a bool")))
}

fn shutdown_report(report: &ShutdownReport) -> Value {
    Value::Dict(vec![
        ("released", Value::count(report.released)),
        (
            "unconfirmed",
            Value::List(
                report
                    .unconfirmed
                    .iter()
                    .map(|r| Value::List(r.names().iter().cloned().map(Value::Str).collect()))
                    .collect(),
            ),
        ),
        (
            "unfinished",
            Value::List(
                report
                    .unfinished
                    .iter()
                    .map(|(work, n)| {
                        Value::Dict(vec![
                            ("work", Value::Str(work.to_string())),
                            ("tasks", Value::count(*n)),
                        ])
                    })
                    .collect(),
            ),
        ),
        ("complete", Value::Bool(report.is_complete())),
    ])
}

#[pymethods]
impl Client {
    /// A client over `nodes` (`redis://`, `rediss://`, `redis+cluster://`,
    /// `redis+sentinel://`, `etcd://`, `zk://` URLs) and, with `from_env`,
    /// the `QUORUMLOCK_*` variables. `options` are the lock settings every
    /// call starts from.
    #[new]
    #[pyo3(signature = (
        nodes=None, *, from_env=false, node_timeout=None, connect_timeout=None,
        drift_factor=None, drift_fixed=None, heal=None, batching=None,
        replica_ack=None, **options
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        nodes: Option<Vec<String>>,
        from_env: bool,
        node_timeout: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        drift_factor: Option<f64>,
        drift_fixed: Option<&Bound<'_, PyAny>>,
        heal: Option<bool>,
        batching: Option<bool>,
        replica_ack: Option<u32>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Client> {
        let fail = |e: quorumlock::Error| Failure::from(e).into_pyerr(py);
        let mut builder = Redlock::builder();
        if from_env {
            builder = builder.from_env().map_err(fail)?;
        }
        builder = builder.nodes(nodes.unwrap_or_default());
        if let Some(timeout) = optional_duration(node_timeout, "node_timeout")? {
            builder = builder.node_timeout(timeout);
        }
        if let Some(timeout) = optional_duration(connect_timeout, "connect_timeout")? {
            builder = builder.connect_timeout(timeout);
        }
        let fixed = optional_duration(drift_fixed, "drift_fixed")?;
        if drift_factor.is_some() || fixed.is_some() {
            builder = builder.drift(
                drift_factor.unwrap_or(quorumlock::DEFAULT_DRIFT_FACTOR),
                fixed.unwrap_or(quorumlock::DEFAULT_DRIFT_FIXED),
            );
        }
        if let Some(on) = heal {
            builder = builder.heal(on);
        }
        if let Some(on) = batching {
            builder = builder.batching(on);
        }
        if let Some(replicas) = replica_ack {
            builder = builder.replica_ack(ReplicaAck::new(replicas));
        }
        builder = builder.options(lock_options(LockOptions::new(), options)?);
        // Building may start the client's connections: on the runtime.
        let handle = runtime::handle()?;
        let _entered = handle.enter();
        let redlock = builder.build().map_err(fail)?;
        Ok(Client {
            redlock,
            process: Process::current(),
        })
    }

    /// Nodes configured (1 for an etcd cluster or a ZooKeeper ensemble).
    #[getter]
    fn nodes(&self) -> usize {
        self.redlock.nodes()
    }

    /// Nodes that must agree.
    #[getter]
    fn quorum(&self) -> usize {
        self.redlock.quorum()
    }

    /// Takes `resources` for `ttl`, waiting as the options say; raises
    /// `LockHeld` when the wait ends with another owner holding it.
    #[pyo3(signature = (blocking, resources, ttl, **options))]
    fn lock<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        resources: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (redlock, resources, ttl) = self.call(py, resources, ttl, options)?;
        let (nodes, quorum, process) = (redlock.nodes(), redlock.quorum(), self.process);
        run(py, blocking, async move {
            let guard = redlock.lock(resources, ttl).await?;
            Ok(Guard::new(Held::Lock(guard), nodes, quorum, process))
        })
    }

    /// One attempt at `resources`: a guard, or `None` while another owner
    /// holds them.
    #[pyo3(signature = (blocking, resources, ttl, **options))]
    fn try_lock<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        resources: &Bound<'py, PyAny>,
        ttl: &Bound<'py, PyAny>,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (redlock, resources, ttl) = self.call(py, resources, ttl, options)?;
        let (nodes, quorum, process) = (redlock.nodes(), redlock.quorum(), self.process);
        run(py, blocking, async move {
            let guard = redlock.try_lock(resources, ttl).await?;
            Ok(guard.map(|guard| Guard::new(Held::Lock(guard), nodes, quorum, process)))
        })
    }

    /// One of `permits` places of the semaphore `name`, for `ttl`: waiting
    /// as the options say (`wait=0`: one attempt, `None` when all are
    /// taken, with `try_only`).
    #[pyo3(signature = (blocking, name, permits, ttl, try_only, **options))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_permit<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        name: &str,
        permits: usize,
        ttl: &Bound<'py, PyAny>,
        try_only: bool,
        options: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.process.check(py)?;
        let redlock = self.with(py, options)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let semaphore = redlock
            .semaphore(name, permits)
            .map_err(|e| Failure::from(e).into_pyerr(py))?;
        let (nodes, quorum, process) = (redlock.nodes(), redlock.quorum(), self.process);
        run(py, blocking, async move {
            let permit = if try_only {
                semaphore.try_acquire(ttl).await?
            } else {
                Some(semaphore.acquire(ttl).await?)
            };
            Ok(permit.map(|permit| Guard::new(Held::Permit(permit), nodes, quorum, process)))
        })
    }

    /// What each node holds for `resource`, and the verdict of a majority.
    fn inspect<'py>(&self, py: Python<'py>, blocking: bool, resource: String) -> PyResult<Bound<'py, PyAny>> {
        self.process.check(py)?;
        let redlock = self.redlock.clone();
        run(py, blocking, async move {
            let inspection = redlock.inspect(&resource).await?;
            Ok(inspect::inspection(&inspection))
        })
    }

    /// Operator tool: deletes the lock of `resource` where it holds `token`
    /// (any holder's, when `token` is `None`).
    #[pyo3(signature = (blocking, resource, token=None))]
    fn force_unlock<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        resource: String,
        token: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.process.check(py)?;
        let redlock = self.redlock.clone();
        run(py, blocking, async move {
            let report = match token {
                Some(token) => redlock.unlock(&resource, &token).await?,
                None => redlock.force_unlock(&resource).await?,
            };
            Ok(inspect::unlock_report(&report))
        })
    }

    /// Ends the client: releases what its guards hold and waits for its
    /// background work, at most `timeout`; returns the shutdown report.
    /// In a forked child, a client of the parent does nothing.
    fn shutdown<'py>(
        &self,
        py: Python<'py>,
        blocking: bool,
        timeout: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = convert::duration(timeout, "timeout")?;
        if !self.process.is_current() {
            return run(py, blocking, async { Ok::<_, Failure>(Value::None) });
        }
        let redlock = self.redlock.clone();
        // Its own task: an `aclose()` cancelled half-way still shuts down.
        let task = runtime::handle()?.spawn(async move { redlock.shutdown(timeout).await });
        run(py, blocking, async move {
            let report = task
                .await
                .map_err(|e| Failure::Runtime(format!("the shutdown task failed: {e}")))?;
            Ok(shutdown_report(&report))
        })
    }

    /// Claims idempotency `key` for `ttl`: see `crate::idempotency`.
    #[pyo3(signature = (key, ttl, result_ttl=None, wait=None, cache_failures=false))]
    fn idempotency<'py>(
        &self,
        py: Python<'py>,
        key: String,
        ttl: &Bound<'py, PyAny>,
        result_ttl: Option<&Bound<'py, PyAny>>,
        wait: Option<&Bound<'py, PyAny>>,
        cache_failures: bool,
    ) -> PyResult<crate::idempotency::Run> {
        self.process.check(py)?;
        let ttl = convert::duration(ttl, "ttl")?;
        let mut jobs = self.redlock.idempotency().cache_failures(cache_failures);
        if let Some(result_ttl) = optional_duration(result_ttl, "result_ttl")? {
            jobs = jobs.result_ttl(result_ttl);
        }
        if let Some(wait) = optional_duration(wait, "wait")? {
            jobs = jobs.wait(wait);
        }
        let _ = py;
        crate::idempotency::Run::start(jobs, key, ttl)
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a quorumlock client cannot be pickled: its connections and renewals belong to this process; \
             make a client in each process",
        ))
    }
}

impl Client {
    /// This client with the call's options, the resources and the ttl.
    fn call(
        &self,
        py: Python<'_>,
        resources: &Bound<'_, PyAny>,
        ttl: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<(Redlock, quorumlock::Resources, Duration)> {
        self.process.check(py)?;
        let redlock = self.with(py, options)?;
        Ok((
            redlock,
            convert::resources(resources)?,
            convert::duration(ttl, "ttl")?,
        ))
    }

    /// This client with the call's options.
    fn with(&self, py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Redlock> {
        if options.is_none_or(|o| o.is_empty()) {
            return Ok(self.redlock.clone());
        }
        let options = lock_options(self.redlock.options(), options)?;
        self.redlock
            .with_options(options)
            .map_err(|e| Failure::from(e).into_pyerr(py))
    }
}
