//! `LD_PRELOAD` shims for the processes under test, compiled from C with
//! `cc` once per test process: the clock skew of a server ([`crate::skew`])
//! and the stall of a `quorumlock` process at a chosen step
//! ([`crate::stall`]).

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The prefix of the build directories under the system temp dir.
const BUILD_DIR_PREFIX: &str = "quorumlock-shim-";

/// How old a build directory of a process that has exited must be before
/// [`sweep_build_dirs`] removes it.
const STALE_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Compiles `source` (C) into `lib<name>.so` in a directory of this
/// process's own, and returns its path, or what went wrong.
///
/// The directory is made fresh under the system temp dir (not Cargo's
/// target dir: that is known only when a test target itself is compiled,
/// and this crate is compiled as a dependency), so concurrent test
/// processes never share a file. It is private to the user (mode 0700), so
/// that no one else can replace the library that processes load. It stays
/// for the life of the process, since a process restarted later (a skewed
/// server) loads the library again; build directories of processes that exited long ago are
/// swept on the way.
pub(crate) fn build(name: &str, source: &str) -> Result<PathBuf, String> {
    let fail = |what: String| format!("building the {name} shim failed: {what}");
    let temp = std::env::temp_dir();
    sweep_build_dirs(&temp);
    let dir = private_dir(&temp).map_err(|e| fail(format!("a build dir under {}: {e}", temp.display())))?;
    let lib = dir.join(format!("lib{name}.so"));
    let file = dir.join(format!("{name}_shim.c"));
    std::fs::write(&file, source).map_err(|e| fail(format!("{}: {e}", file.display())))?;
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&lib)
        .arg(&file)
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
