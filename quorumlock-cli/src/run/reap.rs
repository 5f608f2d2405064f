//! Reaping every child.
//!
//! quorumlock is a child subreaper (PR_SET_CHILD_SUBREAPER): descendants of
//! the command that lose their parent (a daemonising `&` job, a shell that
//! exited first) reparent to quorumlock rather than to init. It reaps all of
//! its children itself, from SIGCHLD, with `waitpid(-1, WNOHANG)`: the
//! statuses of the command and of the guardian are kept, the others
//! (orphans) discarded. So no zombie is left behind, which also makes
//! quorumlock a correct PID 1 in a container.

use std::io;
use std::process::ExitStatus;

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::sys;

/// Collects the exit statuses of quorumlock's children.
pub(crate) struct Reaper {
    sigchld: Signal,
    /// The children whose status matters, and their status once reaped.
    watched: Vec<(u32, Option<ExitStatus>)>,
}

impl Reaper {
    /// Makes quorumlock a subreaper and listens for SIGCHLD. Call before
    /// spawning any child, so that no exit goes unnoticed.
    pub(crate) fn new() -> io::Result<Reaper> {
        sys::become_subreaper()?;
        Ok(Reaper {
            sigchld: signal(SignalKind::child())?,
            watched: Vec::new(),
        })
    }

    /// Keeps the status of `pid` when it is reaped.
    pub(crate) fn watch(&mut self, pid: u32) {
        self.watched.push((pid, None));
    }

    /// The status of a watched child, once it has exited.
    pub(crate) fn status(&self, pid: u32) -> Option<ExitStatus> {
        self.watched
            .iter()
            .find(|(p, _)| *p == pid)
            .and_then(|(_, status)| *status)
    }

    /// Waits for the next SIGCHLD, then reaps (cancel safe).
    pub(crate) async fn changed(&mut self) {
        self.sigchld.recv().await;
        self.reap();
    }

    /// Reaps every child that has exited.
    pub(crate) fn reap(&mut self) {
        while let Some((pid, exited)) = sys::reap_exited() {
            if let Some((_, status)) = self.watched.iter_mut().find(|(p, _)| *p == pid) {
                *status = Some(exited);
            }
        }
    }
}
