//! The binary's calls into the C library, each behind a safe wrapper: the
//! one module of the binary with `unsafe` code, apart from the hook that
//! runs in the command's process between fork and exec (`start::spawn`),
//! which can only be declared with `unsafe`.
//!
//! # Async-signal safety
//!
//! Between fork and exec the child of a multi-threaded process may only make
//! async-signal-safe calls: another thread of the parent may have held the
//! allocator's lock (or any other) at the fork, and nothing in the child will
//! ever release it. The wrappers marked *async-signal-safe* below make one
//! system call on integers and stack memory each: they allocate nothing and
//! take no lock. (`io::Error::last_os_error` and `io::Error::from_raw_os_error`,
//! which they return, only read errno and wrap an integer.) The others may
//! allocate or retry, and are for quorumlock's and the guardian's own use.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use libc::c_int;

/// Sends `signo` to every process of group `pgid`; whether it was sent.
/// `false` when the group is gone (nothing is left to signal) and for
/// groups 0 and 1, which are never signalled: kill(2) reads a group of 0 as
/// the caller's own, and -1 as every process the caller may signal.
pub(crate) fn signal_group(pgid: u32, signo: c_int) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it has no
    // memory-safety preconditions.
    unsafe { libc::kill(-pgid, signo) == 0 }
}

/// Whether any process (a zombie included) is left in group `pgid`.
pub(crate) fn group_alive(pgid: u32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(-pgid, 0) };
    // EPERM: a member we may not signal (it changed its credentials) is
    // still a member.
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Stops this process, as the default action of SIGTSTP would; returns
/// once it is continued.
pub(crate) fn stop_self() {
    // SAFETY: raise(3) has no memory-safety preconditions; SIGSTOP stops
    // every thread of the process until SIGCONT.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}

/// What the process does with a signal: the two dispositions that install
/// no handler code.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Disposition {
    /// The signal is discarded.
    Ignore,
    /// The signal's default action (terminate, stop, ...).
    Default,
}

/// Sets what this process does with `signo`. Async-signal-safe.
pub(crate) fn set_disposition(signo: c_int, disposition: Disposition) {
    let handler = match disposition {
        Disposition::Ignore => libc::SIG_IGN,
        Disposition::Default => libc::SIG_DFL,
    };
    // SAFETY: SIG_IGN and SIG_DFL install no code of ours; an invalid signal
    // number only makes the call fail.
    unsafe {
        libc::signal(signo, handler);
    }
}

/// The process group this process is in. Async-signal-safe.
pub(crate) fn own_group() -> u32 {
    // SAFETY: getpgrp has no preconditions and cannot fail.
    let pgid = unsafe { libc::getpgrp() };
    u32::try_from(pgid).unwrap_or(0)
}

/// Has the kernel SIGKILL this process when the thread that forked it
/// exits (PR_SET_PDEATHSIG). Async-signal-safe.
pub(crate) fn die_with_parent() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; it sets an attribute of
    // this process and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): orphaned
/// descendants reparent to it rather than to init.
pub(crate) fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; it sets an attribute of
    // this process and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reaps one child that has exited, without waiting: its pid and exit
/// status, or `None` when no child has exited (or there is no child).
pub(crate) fn reap_exited() -> Option<(u32, ExitStatus)> {
    loop {
        let mut raw = 0;
        // SAFETY: `raw` is a valid, writable int for the duration of the
        // call; WNOHANG makes it return at once.
        let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
        if pid < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        // 0: children left, none exited; -1 (ECHILD): no children at all.
        return u32::try_from(pid)
            .ok()
            .filter(|pid| *pid != 0)
            .map(|pid| (pid, ExitStatus::from_raw(raw)));
    }
}

/// Makes reads and writes on `fd` fail with `WouldBlock` instead of
/// waiting. The flag belongs to the open file, which every copy of the
/// descriptor shares.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor that is open for the borrow's lifetime,
    // with integer arguments only.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What [`ready`] waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Readiness {
    /// Data to read, or end of file.
    Readable,
    /// Room to write. A pipe is writable once it has room for an atomic
    /// write (PIPE_BUF bytes), more than one line of ours needs.
    Writable,
}

/// Whether `fd` became ready (or was closed) within `timeout`, `None`
/// waiting without limit. The timeout is rounded up to whole milliseconds,
/// so that the wait never ends before it; a wait interrupted by a signal
/// counts as not ready.
pub(crate) fn ready(fd: BorrowedFd<'_>, readiness: Readiness, timeout: Option<Duration>) -> io::Result<bool> {
    let events = match readiness {
        Readiness::Readable => libc::POLLIN,
        Readiness::Writable => libc::POLLOUT,
    };
    let timeout_ms = timeout.map_or(-1, |t| {
        c_int::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(c_int::MAX)
    });
    let mut fds = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    }];
    // SAFETY: `fds` is a valid array of one pollfd for the duration of the
    // call, and its descriptor is open for the borrow's lifetime.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(n > 0)
}

/// CLOCK_MONOTONIC now, in nanoseconds: a clock that all processes of the
/// machine share, unlike `Instant`'s opaque values. 0 if it cannot be read,
/// which Linux never does. Async-signal-safe.
pub(crate) fn mono_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the
    // call; CLOCK_MONOTONIC is always supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_zero_and_one_are_never_signalled() {
        // Signal 0 only checks: were they signalled, both would succeed.
        assert!(!signal_group(0, 0));
        assert!(!signal_group(1, 0));
        assert!(!group_alive(0));
        assert!(!group_alive(1));
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let before = mono_now_ns();
        std::thread::sleep(Duration::from_millis(2));
        assert!(mono_now_ns() >= before + 2_000_000);
    }

    #[test]
    fn a_pipe_with_nothing_in_it_is_not_readable_and_has_room() {
        use std::os::fd::AsFd;
        let (reader, writer) = io::pipe().expect("pipe");
        assert!(!ready(reader.as_fd(), Readiness::Readable, Some(Duration::ZERO)).unwrap());
        assert!(ready(writer.as_fd(), Readiness::Writable, Some(Duration::ZERO)).unwrap());
        drop(writer);
        // End of file counts as readable.
        assert!(ready(reader.as_fd(), Readiness::Readable, Some(Duration::ZERO)).unwrap());
    }
}
