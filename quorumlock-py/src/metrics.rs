//! The library's metrics (the `metrics` facade) in Prometheus's text
//! format, for a `/metrics` endpoint of a Python service.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use pyo3::prelude::*;

use crate::errors;

/// The process's recorder, once enabled.
static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Starts recording the library's metrics (lock calls, holds, losses,
/// renewals, node errors) in this process. Idempotent; raises
/// `RuntimeError` when another recorder was installed first.
#[pyfunction]
pub fn enable_metrics() -> PyResult<()> {
    if RECORDER.get().is_some() {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| errors::runtime(format!("cannot record the metrics: {e}")))?;
    let _ = RECORDER.set(handle);
    Ok(())
}

/// The metrics recorded since `enable_metrics()`, in Prometheus's text
/// exposition format (empty before it).
#[pyfunction]
pub fn render_metrics() -> String {
    RECORDER.get().map(PrometheusHandle::render).unwrap_or_default()
}
