//! What the tests of `quorumlock run` share: a running quorumlock that is
//! cleaned up after a failed assertion, signals, and process state from
//! /proc.

// Each test binary uses its own part of these.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bound for quorumlock to exit once its command has ended.
pub const EXIT_LIMIT: Duration = Duration::from_secs(10);

/// Polls `condition` every 10 ms until it holds (true) or `limit` passed.
pub fn holds_within(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !condition() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Sends signal `name` to `target` (a negative target is a process group).
pub fn signal(target: i64, name: &str) {
    let _ = Command::new("kill")
        .args(["-s", name, "--", &target.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// One process as /proc/PID/stat shows it.
#[derive(Clone)]
pub struct Stat {
    pub pid: u32,
    pub state: char,
    pub ppid: u32,
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

pub fn all_processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(stat)
        .collect()
}

/// The processes of group `pgid` that are alive (zombies have ended: they
/// only wait to be reaped).
pub fn live_members(pgid: u32) -> Vec<Stat> {
    all_processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid && !matches!(p.state, 'Z' | 'X'))
        .collect()
}

/// A running quorumlock. On drop (a failed assertion) it and the command's
/// group are continued and killed, so that nothing outlives the test.
pub struct Running {
    pub child: Child,
    pub group: Option<u32>,
    stderr: Option<JoinHandle<String>>,
    exited: bool,
}

impl Running {
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

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
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What quorumlock (and its guardian) wrote on stderr, once closed.
    pub fn stderr(&mut self) -> String {
        let Some(reader) = self.stderr.take() else {
            return String::new();
        };
        if holds_within(EXIT_LIMIT, || reader.is_finished()) {
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
