//! Python arguments as the library's types: durations (float seconds or a
//! `timedelta`) and resources (a name or a list of names).

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDelta, PyString};
use quorumlock::Resources;

use crate::errors;

/// `value` as a duration: a non-negative float or int of seconds, or a
/// `datetime.timedelta`. Anything else is a `ConfigError` naming `setting`.
pub fn duration(value: &Bound<'_, PyAny>, setting: &str) -> PyResult<Duration> {
    let py = value.py();
    let seconds: f64 = if value.is_instance_of::<PyDelta>() {
        value.call_method0("total_seconds")?.extract()?
    } else if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(errors::config(
            py,
            setting,
            format!("{setting} must be seconds, not a bool"),
        ));
    } else {
        value.extract().map_err(|_| {
            let kind = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            errors::config(
                py,
                setting,
                format!("{setting} must be seconds (a float) or a timedelta, not {kind}"),
            )
        })?
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        errors::config(
            py,
            setting,
            format!("{setting} must be a finite, non-negative number of seconds, not {seconds}"),
        )
    })
}

/// An optional duration argument.
pub fn optional_duration(value: Option<&Bound<'_, PyAny>>, setting: &str) -> PyResult<Option<Duration>> {
    value
        .filter(|v| !v.is_none())
        .map(|v| duration(v, setting))
        .transpose()
}

/// `value` as the resources of a lock: one name, or a list (or tuple) of
/// names, locked together.
pub fn resources(value: &Bound<'_, PyAny>) -> PyResult<Resources> {
    let py = value.py();
    if value.is_instance_of::<PyString>() {
        return Ok(Resources::from(value.extract::<String>()?));
    }
    let names: Vec<String> = value.extract().map_err(|_| {
        errors::config(
            py,
            "resources",
            "resources must be a name (str) or a list of names".to_owned(),
        )
    })?;
    Ok(Resources::from(names))
}
