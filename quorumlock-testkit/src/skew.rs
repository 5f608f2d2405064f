//! Clock skew for one `redis-server`: a fast, slow or jumping wall clock.
//!
//! Redlock's safety argument assumes the nodes' clocks run at about the same
//! rate; the chaos suite breaks that on purpose. Redis computes key expiry
//! from the wall clock (`gettimeofday`, `clock_gettime(CLOCK_REALTIME)`), so
//! skewing those calls in one server process skews its expiry: a node with
//! rate 2.0 expires a `PX 4000` key after 2 s of real time, and a jump of
//! +10 s expires every key with less than 10 s left at once.
//!
//! Technique: an `LD_PRELOAD` shim (`skew_shim.c` beside this file) built
//! with `cc` once per test process. Why not the alternatives:
//! - libfaketime hangs Debian's redis-server: jemalloc reads the clock while
//!   initialising, libfaketime resolves the real function with `dlsym`, which
//!   allocates, which re-enters jemalloc. The shim reads the real clock with
//!   the raw `clock_gettime` syscall instead, and never allocates.
//! - Changing the system clock needs root and skews every process at once
//!   (including the test's own timers and the other nodes).
//!
//! Only the wall clock is skewed; `CLOCK_MONOTONIC` (Redis timers, client
//! timeouts, blocking commands) passes through unchanged. The control file
//! holds `"rate offset_ms"`; the shim re-reads it at most every
//! [`REFRESH`] of real time, so [`SkewedClock::set`] waits a few refresh
//! periods after writing it: every clock read of the server after `set`
//! returns sees the new values.
//!
//! Limits: the state lives in the process, so after `kill` + `restart` the
//! clock restarts from the real time plus the current offset (the time the
//! old process gained through a rate other than 1 is lost). Statically
//! linked binaries and callers of the vDSO by address are not affected.
//! Linux only (raw syscall numbers, `LD_PRELOAD`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::server::{Persistence, RedisServer};
use crate::shim;

/// The C source of the shim, compiled by [`shim_path`].
const SHIM_SOURCE: &str = include_str!("skew_shim.c");

/// How often (at most) the shim re-reads the control file; `REFRESH_NS` in
/// the C source.
pub const REFRESH: Duration = Duration::from_millis(1);

/// How long [`SkewedClock::set`] waits after writing the control file: a few
/// refresh periods, so that a refresh in progress on another server thread
/// cannot hide the change.
const SETTLE: Duration = Duration::from_millis(5);

/// The path of the compiled shim, built on first use in this process.
/// Panics with a clear message when `cc` is missing or fails.
pub fn shim_path() -> &'static Path {
    static SHIM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match SHIM.get_or_init(|| shim::build("skew", SHIM_SOURCE)) {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

/// The skewed wall clock of one (or more) servers, changeable at run time.
///
/// The server's clock reads `start + (real - start) * rate + offset`: the
/// offset is the sum of all jumps, the rate the current speed. Changing the
/// rate does not jump the clock; changing the offset does, by the
/// difference.
#[derive(Debug)]
pub struct SkewedClock {
    dir: PathBuf,
    /// `(rate, offset_ms)` as last written.
    params: Mutex<(f64, i64)>,
}

impl SkewedClock {
    /// A clock running `rate` times as fast as the real one, `offset_ms`
    /// ahead of it (negative: behind). Builds the shim if needed.
    pub fn new(rate: f64, offset_ms: i64) -> SkewedClock {
        shim_path();
        let dir = std::env::temp_dir().join(format!("quorumlock-skew-{}-{}", std::process::id(), next_id()));
        std::fs::create_dir_all(&dir).expect("create the skew control dir");
        let clock = SkewedClock {
            dir,
            params: Mutex::new((1.0, 0)),
        };
        clock.write(rate, offset_ms);
        clock
    }

    /// Environment for a skewed process (`LD_PRELOAD`, `SKEW_RATE`,
    /// `SKEW_OFFSET_MS`, `SKEW_CONTROL`), for [`RedisServer::start_env`].
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let (rate, offset_ms) = self.params();
        vec![
            ("LD_PRELOAD", shim_path().display().to_string()),
            ("SKEW_RATE", rate.to_string()),
            ("SKEW_OFFSET_MS", offset_ms.to_string()),
            ("SKEW_CONTROL", self.control_path().display().to_string()),
        ]
    }

    /// The control file the shim reads (`"rate offset_ms"`).
    pub fn control_path(&self) -> PathBuf {
        self.dir.join("control")
    }

    /// The current `(rate, offset_ms)`.
    pub fn params(&self) -> (f64, i64) {
        *self.params.lock().unwrap()
    }

    /// Sets rate and offset; every clock read of the servers using this
    /// clock after `set` returns sees them (it blocks for a few ms).
    pub fn set(&self, rate: f64, offset_ms: i64) {
        self.write(rate, offset_ms);
        std::thread::sleep(SETTLE);
    }

    /// Changes the speed from now on, without a jump.
    pub fn set_rate(&self, rate: f64) {
        self.set(rate, self.params().1);
    }

    /// Jumps the clock by `delta_ms` (negative: backwards).
    pub fn jump(&self, delta_ms: i64) {
        let (rate, offset_ms) = self.params();
        self.set(rate, offset_ms + delta_ms);
    }

    fn write(&self, rate: f64, offset_ms: i64) {
        assert!(rate.is_finite() && rate >= 0.0, "clock rate {rate}");
        // Write then rename: the shim never reads a half-written file.
        let partial = self.dir.join("control.part");
        std::fs::write(&partial, format!("{rate} {offset_ms}\n")).expect("write skew control");
        std::fs::rename(&partial, self.control_path()).expect("rename skew control");
        *self.params.lock().unwrap() = (rate, offset_ms);
    }
}

impl Drop for SkewedClock {
    fn drop(&mut self) {
        // A server still running keeps its last rate and offset.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisServer {
    /// Starts a server whose wall clock is `clock` (kept across restarts).
    pub fn start_skewed(clock: &SkewedClock, persistence: Persistence, extra_args: &[&str]) -> RedisServer {
        RedisServer::start_env(persistence, extra_args, &clock.env())
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
