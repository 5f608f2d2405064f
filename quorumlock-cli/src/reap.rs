//! Reaping every child, and signalling process groups.
//!
//! quorumlock is a child subreaper (PR_SET_CHILD_SUBREAPER): descendants of
//! the command that lose their parent (a daemonising `&` job, a shell that
//! exited first) reparent to quorumlock rather than to init. It reaps all of
//! its children itself, from SIGCHLD, with `waitpid(-1, WNOHANG)`: the
//! statuses of the command and of the guardian are kept, the others
//! (orphans) discarded. So no zombie is left behind, which also makes
//! quorumlock a correct PID 1 in a container.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::signal::unix::{Signal, SignalKind, signal};

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
        // SAFETY: prctl with integer arguments only; it changes an attribute
        // of this process and touches no memory of ours.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
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
        loop {
            let mut raw = 0;
            // SAFETY: `raw` is a valid, writable int for the duration of the
            // call; WNOHANG makes it return at once.
            #[allow(unsafe_code)]
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // 0: children left, none exited; -1 (ECHILD): no children at all.
            let Ok(pid) = u32::try_from(pid) else { return };
            if pid == 0 {
                return;
            }
            if let Some((_, status)) = self.watched.iter_mut().find(|(p, _)| *p == pid) {
                *status = Some(ExitStatus::from_raw(raw));
            }
        }
    }
}

/// Sends `signo` to every process of group `pgid`. Errors (the group is
/// gone) are ignored: there is nothing left to signal.
pub(crate) fn signal_group(pgid: u32, signo: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it has no
    // memory-safety preconditions. The group is the command's, and its id is
    // not reused while any process of the group remains.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-pgid, signo);
    }
}

/// Whether any process (a zombie included) is left in group `pgid`.
pub(crate) fn group_alive(pgid: u32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks for existence and permission.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(-pgid, 0) };
    // EPERM: a member we may not signal (it changed its credentials) is
    // still a member.
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Stops quorumlock itself, as the default action of SIGTSTP would; returns
/// once it is continued.
pub(crate) fn stop_self() {
    // SAFETY: raise(3) has no memory-safety preconditions; SIGSTOP stops
    // every thread of the process until SIGCONT.
    #[allow(unsafe_code)]
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}
