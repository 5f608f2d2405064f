//! Frozen processes: SIGSTOP until a guard is dropped, for tests that pause
//! a server, a member or a node (a stalled process that keeps its
//! connections).

use std::process::Command;
use std::time::{Duration, Instant};

/// How long [`Paused`] waits for every thread of a process to stop after
/// SIGSTOP. kill(2) returns once the signal is queued; each thread stops
/// only when it next enters the kernel, and a JVM (a ZooKeeper server) has
/// dozens of threads. A test that probes the server before they all stop
/// may still be answered, as if the pause had not happened.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A frozen server process (a redis-server, an etcd member); dropping it
/// sends SIGCONT (also when a test panics).
#[derive(Debug)]
pub struct Paused {
    pid: u32,
}

impl Paused {
    /// Freezes process `pid` with SIGSTOP until the guard is dropped.
    /// Returns once every thread of the process is stopped.
    pub(crate) fn stop(pid: u32) -> Paused {
        Paused::stop_all(&[pid]).remove(0)
    }

    /// Freezes several processes with one SIGSTOP (one `kill` for all of
    /// them), so that they stop within microseconds of each other, not one
    /// process spawn apart; returns once every thread of each is stopped.
    pub(crate) fn stop_all(pids: &[u32]) -> Vec<Paused> {
        signal_all(pids, "STOP");
        pids.iter().copied().for_each(wait_stopped);
        pids.iter().map(|&pid| Paused { pid }).collect()
    }

    /// Resumes the server now.
    pub fn resume(self) {}
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.pid, "CONT");
    }
}

/// Waits until every thread of process `pid` is in the stopped state
/// (`T` in `/proc/<pid>/task/<tid>/stat`); panics after [`STOP_TIMEOUT`].
fn wait_stopped(pid: u32) {
    let started = Instant::now();
    while !all_threads_stopped(pid) {
        assert!(
            started.elapsed() < STOP_TIMEOUT,
            "process {pid} did not stop within {STOP_TIMEOUT:?} of SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether every thread of process `pid` is stopped. A process without
/// `/proc` entries (gone, or no procfs) counts as stopped: there is
/// nothing left that could answer.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and
        // may itself contain spaces or parentheses.
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        state.is_none_or(|rest| rest.starts_with(['T', 't', 'Z', 'X']))
    })
}

/// Sends signal `name` (`STOP`, `CONT`, ...) to process `pid`.
pub(crate) fn signal(pid: u32, name: &str) {
    signal_all(&[pid], name);
}

/// Sends signal `name` to every process of `pids`, with one `kill`.
fn signal_all(pids: &[u32], name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -{name} {pids:?} failed");
}
