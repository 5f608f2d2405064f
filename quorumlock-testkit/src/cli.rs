//! Tests of the `quorumlock` binary: a command over some servers, a running
//! quorumlock that is cleaned up after a failed assertion, the files its
//! command writes, signals, and process state from /proc.
//!
//! The kit cannot depend on the binary's crate, so a test file names the
//! binary once, with the path Cargo gives its tests
//! (`env!("CARGO_BIN_EXE_quorumlock")`), as a [`Binary`]:
//!
//! ```no_run
//! use quorumlock_testkit::cli::{Binary, exit, scratch, wait_for_line};
//! use quorumlock_testkit::start_nodes;
//!
//! // In a test of quorumlock-cli: Binary::new(env!("CARGO_BIN_EXE_quorumlock")).
//! const QUORUMLOCK: Binary = Binary::new("target/debug/quorumlock");
//!
//! let nodes = start_nodes(3);
//! let dir = scratch("example");
//! let started = dir.join("started");
//! let script = format!("echo $$ > {}; sleep 1", started.display());
//! let mut run = QUORUMLOCK
//!     .command(&nodes)
//!     .args(["run", "--key", "job", "--", "sh", "-c", &script])
//!     .spawn()
//!     .expect("spawn quorumlock");
//! let pid = wait_for_line(&started, std::time::Duration::from_secs(10));
//! let busy = QUORUMLOCK
//!     .command(&nodes)
//!     .args(["run", "--key", "job", "--wait", "0", "--", "true"])
//!     .output()
//!     .expect("run quorumlock");
//! assert_eq!(busy.status.code(), Some(exit::BUSY), "{pid} holds the lock");
//! assert!(run.wait().expect("wait").success());
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{RedisServer, urls};

/// Exit statuses of `quorumlock`, as its help and docs/operations.md
/// document them.
pub mod exit {
    /// Bad usage.
    pub const USAGE: i32 = 2;
    /// Fewer than a majority of nodes answered.
    pub const UNREACHABLE: i32 = 69;
    /// Another owner held the lock for the whole `--wait`.
    pub const BUSY: i32 = 75;
    /// The lock was lost while the command ran, or before it started.
    pub const LOST: i32 = 79;
    /// The command was not found.
    pub const NOT_FOUND: i32 = 127;
}

/// Bound for quorumlock to exit once its command has ended.
pub const EXIT_LIMIT: Duration = Duration::from_secs(10);

/// How often the waits here look again.
const POLL: Duration = Duration::from_millis(10);

/// The variable that gives quorumlock its nodes.
const NODES_ENV: &str = "QUORUMLOCK_NODES";

/// The `quorumlock` binary under test.
#[derive(Clone, Copy, Debug)]
pub struct Binary {
    path: &'static str,
}

impl Binary {
    /// The binary at `path`: `env!("CARGO_BIN_EXE_quorumlock")` in a test.
    pub const fn new(path: &'static str) -> Binary {
        Binary { path }
    }

    /// A command running the binary over `servers` (in `QUORUMLOCK_NODES`;
    /// with none, the variable is not set), with stdin from /dev/null. The
    /// test's own `QUORUMLOCK_*` variables are not passed on: a developer's
    /// exported nodes or wait must not change what a test sees.
    pub fn command(&self, servers: &[RedisServer]) -> Command {
        let mut cmd = Command::new(self.path);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("QUORUMLOCK_") {
                cmd.env_remove(name);
            }
        }
        if !servers.is_empty() {
            cmd.env(NODES_ENV, urls(servers).join(","));
        }
        cmd.stdin(Stdio::null());
        cmd
    }
}

/// Bytes a process wrote, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fresh empty directory for the files of one test (`name`), private to
/// this test process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quorumlock-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Waits until `path` holds a complete line, and returns the text, trimmed:
/// the command under test got that far. A file that merely exists may still
/// be empty (the shell creates it before it writes); for one whose content
/// does not matter, [`crate::wait_until_exists`] does. Panics once `limit`
/// has passed.
pub fn wait_for_line(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().to_owned();
        }
        assert!(
            start.elapsed() < limit,
            "{} did not get a line within {limit:?}",
            path.display()
        );
        std::thread::sleep(POLL);
    }
}

/// Polls `condition` every 10 ms until it holds (true) or `limit` has passed
/// (false); blocking, for tests without a runtime (the crate root's
/// [`crate::holds_within`] is its async form).
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
    true
}

/// Waits for `child` to exit, at most `limit`; kills it and panics after.
pub fn wait_child(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("quorumlock did not exit within {limit:?}");
        }
        std::thread::sleep(POLL);
    }
}

/// Sends signal `name` (`TERM`, `KILL`, ...) to `target`, a process, or
/// with a negative number a process group; an error (it is gone) is ignored.
pub fn signal(target: i64, name: &str) {
    let _ = Command::new("kill")
        .args(["-s", name, "--", &target.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// One process as /proc/PID/stat shows it.
#[derive(Clone)]
pub struct Stat {
    /// Its process id.
    pub pid: u32,
    /// Its state: `R`, `S`, `T` (stopped), `Z` (zombie), ...
    pub state: char,
    /// Its parent's process id.
    pub ppid: u32,
    /// Its process group.
    pub pgrp: u32,
}

impl std::fmt::Debug for Stat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} state {} ppid {} pgrp {}",
            self.pid, self.state, self.ppid, self.pgrp
        )
    }
}

/// Process `pid` as /proc shows it, if it exists.
pub fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold ") ".
    let (_, rest) = text.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat {
        pid,
        state,
        ppid,
        pgrp,
    })
}

/// Every process of the machine (that /proc shows).
pub fn all_processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(stat)
        .collect()
}

/// The children of process `pid`.
pub fn children(pid: u32) -> Vec<Stat> {
    all_processes().into_iter().filter(|p| p.ppid == pid).collect()
}

/// The processes of group `pgid` that are alive (zombies have ended: they
/// only wait to be reaped).
pub fn live_members(pgid: u32) -> Vec<Stat> {
    all_processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid && !matches!(p.state, 'Z' | 'X'))
        .collect()
}

/// A running quorumlock, its stderr collected. On drop (a failed assertion)
/// it and its command's group (once known) are continued and killed, so
/// that nothing outlives the test.
pub struct Running {
    /// The quorumlock process.
    pub child: Child,
    /// The command's process group, once the test knows it.
    pub group: Option<u32>,
    stderr: Option<JoinHandle<String>>,
    exited: bool,
}

impl Running {
    /// Spawns `cmd` (a quorumlock command) with its stderr collected.
    pub fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn quorumlock");
        let mut pipe = child.stderr.take().expect("piped stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        });
        Running {
            child,
            group: None,
            stderr: Some(stderr),
            exited: false,
        }
    }

    /// quorumlock's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `name` to quorumlock.
    pub fn signal(&self, name: &str) {
        assert!(!self.exited, "quorumlock has exited");
        signal(i64::from(self.pid()), name);
    }

    /// Waits for quorumlock to exit, at most `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.exited = true;
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "quorumlock did not exit within {limit:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// What quorumlock (and its guardian) wrote on stderr, once closed.
    pub fn stderr(&mut self) -> String {
        let Some(reader) = self.stderr.take() else {
            return String::new();
        };
        if wait_until(EXIT_LIMIT, || reader.is_finished()) {
            reader.join().unwrap_or_default()
        } else {
            "<stderr still open>".to_owned()
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.exited {
            signal(i64::from(self.pid()), "CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(group) = self.group
            && !live_members(group).is_empty()
        {
            signal(-i64::from(group), "KILL");
            signal(-i64::from(group), "CONT");
        }
    }
}
