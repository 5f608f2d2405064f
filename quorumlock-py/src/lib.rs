//! quorumlock for Python: the extension module `quorumlock._quorumlock`.
//!
//! The Python package (`python/quorumlock/`) is the API; this module is
//! what it stands on: a client, a guard, an idempotency run, and the
//! runtime they share. Its classes take `blocking` in each call, so the
//! sync and the asyncio clients of the package are one client here.

mod awaitable;
mod client;
mod convert;
mod errors;
mod guard;
mod idempotency;
mod inspect;
mod metrics;
mod runtime;
mod value;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _quorumlock(module: &Bound<'_, PyModule>) -> PyResult<()> {
    // rediss:// and etcds:// need a crypto provider; a Python program
    // cannot install one, so the module does (ring's, as the CLI's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    module.add_class::<client::Client>()?;
    module.add_class::<guard::Guard>()?;
    module.add_class::<idempotency::Run>()?;
    module.add_function(wrap_pyfunction!(metrics::enable_metrics, module)?)?;
    module.add_function(wrap_pyfunction!(metrics::render_metrics, module)?)?;
    module.add("DEFAULT_TTL", quorumlock::DEFAULT_TTL.as_secs_f64())?;
    module.add("DEFAULT_WAIT", quorumlock::DEFAULT_WAIT.as_secs_f64())?;
    module.add(
        "DEFAULT_SHUTDOWN_TIMEOUT",
        quorumlock::DEFAULT_SHUTDOWN_TIMEOUT.as_secs_f64(),
    )?;
    Ok(())
}
