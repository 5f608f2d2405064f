//! Stalls at a known step, for tests of what happens when a process or a
//! thread is held up exactly there: a process under test that stops itself
//! (SIGSTOP), and a thread that blocks in a `tracing` event of the library
//! ([`StallOnEvent`]).
//!
//! A stall sent from outside lands wherever the process happens to be; the
//! window between two steps of `quorumlock run` (taking the lock, starting
//! the command) is far too short to hit that way. So the process stops
//! itself, through an `LD_PRELOAD` shim (`stall_shim.c` beside this file)
//! that raises SIGSTOP in its first call of `fork` or `execvp`. A test waits
//! until the process is stopped ([`is_stopped`]), does what it wants to
//! happen meanwhile, and continues it with SIGCONT.
//!
//! Where `quorumlock run` meets these calls: it starts its guardian with
//! `posix_spawn` (no `fork` call), and the command with `fork` (its
//! preparation before exec needs one), after which the child calls
//! `execvp`. So [`StallAt::Fork`] stops quorumlock after it took the lock
//! and started the guardian, before the command's process exists, and
//! [`StallAt::Exec`] stops the command's process between its last check
//! and the exec. The shim removes itself from the environment as it loads:
//! the processes the stalled one starts run unchanged.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use crate::shim;

/// The C source of the shim.
const SHIM_SOURCE: &str = include_str!("stall_shim.c");

/// The step at which the process stops itself (once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StallAt {
    /// In its first `fork()`, before forking.
    Fork,
    /// In the first `execvp()` of the process or a child it forks, before
    /// executing.
    Exec,
}

/// Environment for a process that stops itself once at `at` (`LD_PRELOAD`
/// and `STALL_AT`). Builds the shim if needed; panics with a clear message
/// when `cc` is missing or fails.
pub fn env(at: StallAt) -> Vec<(&'static str, String)> {
    let step = match at {
        StallAt::Fork => "fork",
        StallAt::Exec => "exec",
    };
    vec![
        ("LD_PRELOAD", shim_path().display().to_string()),
        ("STALL_AT", step.to_owned()),
    ]
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`).
pub fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The command name is in parentheses and may itself hold ") ".
            let (_, rest) = stat.rsplit_once(") ")?;
            rest.chars().next()
        })
        == Some('T')
}

fn shim_path() -> &'static Path {
    static SHIM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match SHIM.get_or_init(|| shim::build("stall", SHIM_SOURCE)) {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

/// A `tracing` subscriber that blocks the thread emitting a given event
/// (by its message) once, for a given time: the library's own thread held
/// up at a known step, as a busy runtime or a slow log sink would hold it.
///
/// Install it for the test's thread with `tracing::subscriber::set_default`
/// (a `current_thread` runtime polls every task on that thread).
#[derive(Debug)]
pub struct StallOnEvent {
    message: &'static str,
    stall: Duration,
    armed: AtomicBool,
}

impl StallOnEvent {
    /// Blocks for `stall` in the first event whose message is `message`.
    pub fn new(message: &'static str, stall: Duration) -> StallOnEvent {
        StallOnEvent {
            message,
            stall,
            armed: AtomicBool::new(true),
        }
    }

    /// Whether the stall happened.
    pub fn stalled(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

/// Finds whether an event's message is the one looked for.
struct MessageIs<'a>(&'a str, bool);

impl Visit for MessageIs<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.1 = format!("{value:?}") == self.0;
        }
    }
}

impl Subscriber for StallOnEvent {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut found = MessageIs(self.message, false);
        event.record(&mut found);
        if found.1 && self.armed.swap(false, Ordering::SeqCst) {
            // The stall itself: this thread does nothing else meanwhile.
            std::thread::sleep(self.stall);
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
