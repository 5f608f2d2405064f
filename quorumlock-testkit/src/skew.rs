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

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::server::{Persistence, RedisServer};

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
    match SHIM.get_or_init(build_shim) {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

/// The prefix of the build directories under the system temp dir.
const BUILD_DIR_PREFIX: &str = "quorumlock-skew-shim-";

/// How old a build directory of a process that has exited must be before
/// [`sweep_build_dirs`] removes it.
const STALE_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Compiles the shim into a directory of this process's own.
///
/// The directory is made fresh under the system temp dir (not Cargo's
/// target dir: that is known only when a test target itself is compiled,
/// and this crate is compiled as a dependency), so concurrent test
/// processes never share a file. It is private to the user (mode 0700), so
/// that no one else can replace the library that servers load. It stays for
/// the life of the process, since a skewed server restarted later loads the
/// library again; build directories of processes that exited long ago are
/// swept on the way.
fn build_shim() -> Result<PathBuf, String> {
    let fail = |what: String| format!("building the clock-skew shim failed: {what}");
    let temp = std::env::temp_dir();
    sweep_build_dirs(&temp);
    let dir = private_dir(&temp).map_err(|e| fail(format!("a build dir under {}: {e}", temp.display())))?;
    let source = dir.join("skew_shim.c");
    let lib = dir.join("libskew.so");
    std::fs::write(&source, SHIM_SOURCE).map_err(|e| fail(format!("{}: {e}", source.display())))?;
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&lib)
        .arg(&source)
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => fail(
                "`cc` was not found on PATH; install a C compiler with \
                 `sudo apt-get install -y gcc` (Debian/Ubuntu)"
                    .to_string(),
            ),
            _ => fail(format!("running cc: {e}")),
        })?;
    if !output.status.success() {
        return Err(fail(format!(
            "cc exited with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(lib)
}

/// A new directory `<prefix><pid>-<n>` under `temp`, mode 0700. `create`
/// fails on an existing path, so a directory left by an earlier process
/// with the same id (or made by someone else) is never reused.
fn private_dir(temp: &Path) -> io::Result<PathBuf> {
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    let mut last = None;
    for n in 0..100 {
        let dir = temp.join(format!("{BUILD_DIR_PREFIX}{}-{n}", std::process::id()));
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free name")))
}

/// Removes the build directories under `temp` whose process has exited
/// (no `/proc/<pid>`) and that were last written more than [`STALE_AFTER`]
/// ago. Both conditions, so that a directory is not taken from under a
/// process this one cannot see (another PID namespace sharing the temp
/// dir). Failures are ignored: the directories are only litter.
fn sweep_build_dirs(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(BUILD_DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|written| written.elapsed().is_ok_and(|age| age > STALE_AFTER));
        if stale && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
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
