//! Plain Python values (dicts, lists, numbers, text) built on the runtime's
//! threads without the GIL and made Python objects when Python takes them:
//! the reports (release, shutdown, inspection, unlock) are dicts.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A plain value.
pub enum Value {
    None,
    Bool(bool),
    Int(u64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Dict(Vec<(&'static str, Value)>),
}

impl Value {
    /// A duration as float seconds.
    pub fn seconds(duration: Duration) -> Value {
        Value::Float(duration.as_secs_f64())
    }

    /// A count.
    pub fn count(n: usize) -> Value {
        Value::Int(n as u64)
    }
}

impl<'py> IntoPyObject<'py> for Value {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Value::None => py.None().into_bound(py),
            Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
            Value::Int(n) => n.into_pyobject(py)?.into_any(),
            Value::Float(x) => x.into_pyobject(py)?.into_any(),
            Value::Str(s) => s.into_pyobject(py)?.into_any(),
            Value::List(items) => {
                let list = PyList::empty(py);
                for item in items {
                    list.append(item.into_pyobject(py)?)?;
                }
                list.into_any()
            }
            Value::Dict(entries) => {
                let dict = PyDict::new(py);
                for (key, value) in entries {
                    dict.set_item(key, value.into_pyobject(py)?)?;
                }
                dict.into_any()
            }
        })
    }
}
