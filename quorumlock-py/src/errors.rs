//! The library's errors as the exceptions of `quorumlock._errors`.
//!
//! The exception classes are Python classes (some have two bases:
//! `QuorumUnreachable` is also a `ConnectionError`, `ConfigError` also a
//! `ValueError`), so an exception can only be made with the GIL held. The
//! runtime's threads never take it: an async call's future ends in a
//! [`Reply`], which becomes a value or an exception when Python takes the
//! result, under the GIL.

use pyo3::BoundObject;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use quorumlock::{Error, IdempotencyError, Setting};

/// What went wrong in a call, before it becomes a Python exception.
#[derive(Debug)]
pub enum Failure {
    /// The library's error of a lock call.
    Lock(Error),
    /// An idempotency key's run failed.
    Idempotency(IdempotencyError),
    /// The client cannot be used here (shut down, or made before a fork).
    Closed(String),
    /// The runtime itself failed (a task panicked).
    Runtime(String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Lock(error)
    }
}

impl From<IdempotencyError> for Failure {
    fn from(error: IdempotencyError) -> Failure {
        match error {
            IdempotencyError::Lock(error) => Failure::Lock(error),
            other => Failure::Idempotency(other),
        }
    }
}

/// A call's result, made a Python object (or raised) under the GIL.
pub struct Reply<T>(pub Result<T, Failure>);

impl<'py, T> IntoPyObject<'py> for Reply<T>
where
    T: IntoPyObject<'py>,
{
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Ok(value) => value
                .into_pyobject(py)
                .map(|v| v.into_any().into_bound())
                .map_err(Into::into),
            Err(failure) => Err(failure.into_pyerr(py)),
        }
    }
}

/// A `PyErr` for failures outside the library (no GIL needed).
pub fn runtime(message: String) -> PyErr {
    PyRuntimeError::new_err(message)
}

/// The module that defines the exception classes.
fn classes(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static MODULE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || {
        py.import("quorumlock._errors").map(|m| m.into_any().unbind())
    })?;
    Ok(module.bind(py))
}

/// An exception of class `name` with `message` and the attributes `fields`.
fn raise(py: Python<'_>, name: &str, message: String, fields: &[(&str, Py<PyAny>)]) -> PyErr {
    let made = || -> PyResult<PyErr> {
        let class = classes(py)?.getattr(name)?.cast_into::<PyType>()?;
        let error = class.call1((message.clone(),))?;
        for (field, value) in fields {
            error.setattr(*field, value)?;
        }
        Ok(PyErr::from_value(error))
    };
    made().unwrap_or_else(|e| e)
}

fn int(py: Python<'_>, n: usize) -> Py<PyAny> {
    n.into_pyobject(py)
        .map(|v| v.into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

fn seconds(py: Python<'_>, d: std::time::Duration) -> Py<PyAny> {
    d.as_secs_f64()
        .into_pyobject(py)
        .map(|v| v.into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

fn strings(py: Python<'_>, errors: &[quorumlock::NodeError]) -> Py<PyAny> {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts
        .into_pyobject(py)
        .map(|v| v.into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

impl Failure {
    /// The exception Python raises for this failure.
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Lock(error) => lock_error(py, error),
            Failure::Idempotency(error) => idempotency_error(py, error),
            Failure::Closed(message) => raise(py, "ClientClosed", message, &[]),
            Failure::Runtime(message) => runtime(message),
        }
    }
}

/// A `ConfigError` naming `setting`.
pub fn config(py: Python<'_>, setting: &str, message: String) -> PyErr {
    let setting = setting
        .into_pyobject(py)
        .map(|s| s.into_any().unbind())
        .unwrap_or_else(|_| py.None());
    raise(py, "ConfigError", message, &[("setting", setting)])
}

fn lock_error(py: Python<'_>, error: Error) -> PyErr {
    let message = error.to_string();
    match &error {
        Error::Held {
            refused,
            nodes,
            errors,
        } => raise(
            py,
            "LockHeld",
            message,
            &[
                ("refused", int(py, *refused)),
                ("nodes", int(py, *nodes)),
                ("node_errors", strings(py, errors)),
            ],
        ),
        Error::Unreachable {
            succeeded,
            refused,
            quorum,
            nodes,
            errors,
        } => raise(
            py,
            "QuorumUnreachable",
            message,
            &[
                ("succeeded", int(py, *succeeded)),
                ("refused", int(py, *refused)),
                ("quorum", int(py, *quorum)),
                ("nodes", int(py, *nodes)),
                ("node_errors", strings(py, errors)),
            ],
        ),
        Error::ValidityUsedUp { elapsed, ttl, min } => raise(
            py,
            "ValidityUsedUp",
            message,
            &[
                ("elapsed", seconds(py, *elapsed)),
                ("ttl", seconds(py, *ttl)),
                ("min_validity", seconds(py, *min)),
            ],
        ),
        Error::Lost {
            confirmed,
            quorum,
            nodes,
        } => raise(
            py,
            "LockLost",
            message,
            &[
                ("confirmed", int(py, *confirmed)),
                ("quorum", int(py, *quorum)),
                ("nodes", int(py, *nodes)),
            ],
        ),
        Error::Config(config_error) => config(
            py,
            &setting_name(config_error.setting()),
            config_error.message().to_owned(),
        ),
        Error::Closed => raise(py, "ClientClosed", message, &[]),
        _ => raise(py, "Error", message, &[]),
    }
}

fn idempotency_error(py: Python<'_>, error: IdempotencyError) -> PyErr {
    let message = error.to_string();
    match error {
        IdempotencyError::Lock(error) => lock_error(py, error),
        IdempotencyError::InProgress { .. } => raise(py, "IdempotencyInProgress", message, &[]),
        IdempotencyError::CachedFailure { .. } => raise(py, "CachedFailure", message, &[]),
        _ => raise(py, "Error", message, &[]),
    }
}

/// The Python name of a setting: the keyword argument (or environment
/// variable) that sets it.
fn setting_name(setting: Setting) -> String {
    if let Setting::Env(variable) = setting {
        return variable.to_owned();
    }
    let debug = format!("{setting:?}");
    let mut name = String::with_capacity(debug.len() + 4);
    for (i, c) in debug.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
        } else {
            name.push(c);
        }
    }
    name
}
