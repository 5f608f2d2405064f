//! The guardian: a small process that kills the command's process group
//! when quorumlock can no longer vouch for the lock.
//!
//! quorumlock's own supervision cannot help when quorumlock itself is
//! SIGKILLed, OOM-killed or stopped: PR_SET_PDEATHSIG reaches only the
//! command's first process, and nothing at all happens while quorumlock is
//! stopped. So `run` re-executes its own binary as `quorumlock __guardian`,
//! in a process group of its own (signals to quorumlock's group, such as the
//! terminal's Ctrl-C, or to the command's group never reach it) and with the
//! job-control and termination signals ignored. Its stdin is the read end of
//! a pipe whose write end only quorumlock holds.
//!
//! The protocol is a stream of fixed-size messages ([`MESSAGE_LEN`] bytes:
//! a kind and a value, both little-endian `u64`):
//! - [`Kind::Group`]: the command's process group id. The command writes it
//!   itself, between fork and exec (see `supervise::spawn`), so the guardian
//!   knows the group before the command runs, with no window in between.
//! - [`Kind::Deadline`]: the lock's hard validity deadline in CLOCK_MONOTONIC
//!   nanoseconds (the clock is system-wide, so both processes read the same
//!   one). quorumlock sends it before spawning the command and again whenever
//!   a renewal moves the validity.
//! - [`Kind::StandDown`]: the command's group has ended; exit without killing.
//!
//! The guardian sends SIGKILL to the whole group, then exits, as soon as
//! either the pipe reaches end of file without a stand-down (quorumlock
//! died), or the last deadline passes without a newer one (quorumlock is
//! stopped or hung, and the lock may be gone).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};

use tokio::time::Instant;

use crate::nodes;

/// Bytes in one message: the kind, then the value.
pub(crate) const MESSAGE_LEN: usize = 16;

/// The argument that makes the binary run as a guardian.
pub(crate) const SUBCOMMAND: &str = "__guardian";

/// What a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Kind {
    /// The value is the command's process group id.
    Group = 1,
    /// The value is the lock's validity deadline, CLOCK_MONOTONIC nanoseconds.
    Deadline = 2,
    /// The command's group has ended: exit without killing anything.
    StandDown = 3,
}

impl Kind {
    fn from_wire(raw: u64) -> Option<Kind> {
        [Kind::Group, Kind::Deadline, Kind::StandDown]
            .into_iter()
            .find(|kind| *kind as u64 == raw)
    }
}

/// A message as written on the pipe. Pure arithmetic on the stack, so that
/// the command's `pre_exec` (async-signal context) can build one.
pub(crate) const fn encode(kind: Kind, value: u64) -> [u8; MESSAGE_LEN] {
    let kind = (kind as u64).to_le_bytes();
    let value = value.to_le_bytes();
    let mut message = [0u8; MESSAGE_LEN];
    let mut i = 0;
    while i < 8 {
        message[i] = kind[i];
        message[8 + i] = value[i];
        i += 1;
    }
    message
}

/// The kind and value of a message, or `None` for an unknown kind.
fn decode(message: &[u8; MESSAGE_LEN]) -> Option<(Kind, u64)> {
    let mut kind = [0u8; 8];
    let mut value = [0u8; 8];
    kind.copy_from_slice(&message[..8]);
    value.copy_from_slice(&message[8..]);
    Kind::from_wire(u64::from_le_bytes(kind)).map(|kind| (kind, u64::from_le_bytes(value)))
}

/// Why the guardian exited, as its exit status (read by quorumlock when it
/// is still alive to see it).
pub(crate) mod status {
    /// Told to stand down: the command's group had ended.
    pub(crate) const STOOD_DOWN: u8 = 0;
    /// The pipe closed without a stand-down: quorumlock died.
    pub(crate) const ORPHANED: u8 = 1;
    /// The lock's validity deadline passed without a newer one.
    pub(crate) const DEADLINE: u8 = 2;
    /// A message or the pipe itself was unusable.
    pub(crate) const BROKEN: u8 = 3;
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of the deadlines.
pub(crate) fn mono_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the
    // call; CLOCK_MONOTONIC is always supported on Linux.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// `valid_until` (tokio's monotonic clock) as a CLOCK_MONOTONIC deadline.
pub(crate) fn deadline_ns(valid_until: Instant) -> u64 {
    // The raw clock is read first: the deadline then comes out a little
    // early rather than late, so the guardian never trusts a lapsed lock.
    let mono = mono_now_ns();
    let left = valid_until.saturating_duration_since(Instant::now());
    mono.saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}

/// quorumlock's end of the pipe to a running guardian.
pub(crate) struct Guardian {
    pid: u32,
    pipe: io::PipeWriter,
    sent: Option<Instant>,
    stood_down: bool,
}

impl Guardian {
    /// Starts a guardian in a process group of its own.
    pub(crate) fn spawn() -> io::Result<Guardian> {
        let (reader, writer) = io::pipe()?;
        // A guardian that stops reading (stopped by someone) must never block
        // quorumlock's renewals behind a full pipe.
        set_nonblocking(writer.as_raw_fd())?;
        // The running binary, even if its file was replaced or deleted since,
        // so that both ends speak the same protocol; /proc may be missing in
        // some containers, hence the fallback.
        let child = match guardian_command("/proc/self/exe".into(), reader.try_clone()?).spawn() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                guardian_command(std::env::current_exe()?, reader.try_clone()?).spawn()?
            }
            other => other?,
        };
        drop(reader);
        Ok(Guardian {
            pid: child.id(),
            pipe: writer,
            sent: None,
            stood_down: false,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The write end, for the command to announce its group before exec.
    pub(crate) fn fd(&self) -> RawFd {
        self.pipe.as_raw_fd()
    }

    /// Sends the lock's validity deadline if it moved since the last one.
    /// A full pipe (a guardian that is not reading) skips this update: the
    /// guardian then acts on an older, earlier deadline, which errs on the
    /// side of killing.
    pub(crate) fn update(&mut self, valid_until: Instant) -> io::Result<()> {
        if self.sent == Some(valid_until) {
            return Ok(());
        }
        match self.send(Kind::Deadline, deadline_ns(valid_until)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
            Ok(()) => {
                self.sent = Some(valid_until);
                Ok(())
            }
        }
    }

    /// Tells the guardian that the command's group has ended.
    pub(crate) fn stand_down(&mut self) -> io::Result<()> {
        if self.stood_down {
            return Ok(());
        }
        self.stood_down = true;
        self.send(Kind::StandDown, 0)
    }

    pub(crate) fn stood_down(&self) -> bool {
        self.stood_down
    }

    fn send(&mut self, kind: Kind, value: u64) -> io::Result<()> {
        // Writes of at most PIPE_BUF bytes to a pipe are atomic: the message
        // goes whole or not at all.
        let written = self.pipe.write(&encode(kind, value))?;
        if written == MESSAGE_LEN {
            Ok(())
        } else {
            Err(io::Error::other("short write to the guardian"))
        }
    }
}

fn guardian_command(program: std::path::PathBuf, stdin: io::PipeReader) -> Command {
    let mut cmd = Command::new(program);
    cmd.arg0("quorumlock")
        .arg(SUBCOMMAND)
        .process_group(0)
        // Not to keep the caller's directory busy (an unmount) after quorumlock died.
        .current_dir("/")
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // It needs no nodes, and lives as long as the command.
    for name in nodes::SECRET_ENV {
        cmd.env_remove(name);
    }
    cmd
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    #[allow(unsafe_code)]
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

/// Why the guardian kills when the deadline passes.
const LAPSED: &str = "the lock's validity passed without renewal";

/// Signals the guardian shrugs off: a terminal's Ctrl-C, Ctrl-\ and Ctrl-Z,
/// hang-ups, termination requests, and terminal I/O from the background.
const IGNORED: [libc::c_int; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

/// The guardian process: reads messages from stdin until told to stand down,
/// and kills the command's group when quorumlock dies or the deadline passes.
pub(crate) fn main() -> ExitCode {
    for signo in IGNORED {
        // SAFETY: setting a signal's disposition to SIG_IGN installs no code
        // of ours; the process is single-threaded at this point.
        #[allow(unsafe_code)]
        unsafe {
            libc::signal(signo, libc::SIG_IGN);
        }
    }
    // SAFETY: fd 0 is this process's stdin, opened by the parent; nothing
    // else in the guardian uses it, so the File is its only owner.
    #[allow(unsafe_code)]
    let mut stdin = unsafe { File::from_raw_fd(libc::STDIN_FILENO) };
    let mut group: Option<libc::pid_t> = None;
    let mut deadline: Option<u64> = None;
    // The deadline passed while no group was known.
    let mut lapsed = false;
    let mut message = [0u8; MESSAGE_LEN];
    let mut filled = 0;
    loop {
        let timeout_ms = match deadline {
            None => -1,
            Some(at) => {
                let now = mono_now_ns();
                if now >= at {
                    if group.is_some() {
                        return kill(group, status::DEADLINE, LAPSED);
                    }
                    // quorumlock stalled before the command announced its
                    // group: wait for it (to kill it at once) or for the
                    // stand-down that follows a start refused as too late.
                    deadline = None;
                    lapsed = true;
                    continue;
                }
                // Rounded up, so that poll does not wake just before the deadline.
                let ms = (at - now).div_ceil(1_000_000);
                libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
            }
        };
        match ready(libc::STDIN_FILENO, libc::POLLIN, timeout_ms) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return kill(group, status::BROKEN, "cannot poll its pipe"),
        }
        match stdin.read(&mut message[filled..]) {
            Ok(0) => return kill(group, status::ORPHANED, "quorumlock is gone"),
            Ok(n) => filled += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock) => {
                continue;
            }
            Err(_) => return kill(group, status::BROKEN, "cannot read its pipe"),
        }
        if filled < MESSAGE_LEN {
            continue;
        }
        filled = 0;
        match decode(&message) {
            Some((Kind::StandDown, _)) => return ExitCode::from(status::STOOD_DOWN),
            // A lapsed lock stays lapsed: a later deadline cannot revive it
            // (the lock is never renewed after its validity passed).
            Some((Kind::Deadline, at)) if !lapsed => deadline = Some(at),
            Some((Kind::Deadline, _)) => {}
            Some((Kind::Group, pgid)) => match libc::pid_t::try_from(pgid) {
                // Group 1 would be init's, and our own would be a mistake.
                Ok(pgid) if pgid > 1 && pgid != own_group() => {
                    group = Some(pgid);
                    if lapsed {
                        return kill(group, status::DEADLINE, LAPSED);
                    }
                }
                _ => return kill(group, status::BROKEN, "was sent a bad process group"),
            },
            None => return kill(group, status::BROKEN, "was sent an unknown message"),
        }
    }
}

/// Whether `fd` became ready for `events` (or closed) within `timeout_ms`.
/// A pipe is writable once it has room for an atomic write (PIPE_BUF
/// bytes), more than one line of ours needs.
fn ready(fd: RawFd, events: libc::c_short, timeout_ms: libc::c_int) -> io::Result<bool> {
    let mut fds = [libc::pollfd {
        fd,
        events,
        revents: 0,
    }];
    // SAFETY: `fds` is a valid array of one pollfd for the duration of the call.
    #[allow(unsafe_code)]
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

fn own_group() -> libc::pid_t {
    // SAFETY: getpgrp has no preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::getpgrp()
    }
}

/// Kills the command's group (if known), says why on stderr, and returns
/// `code` as the exit status.
fn kill(group: Option<libc::pid_t>, code: u8, why: &str) -> ExitCode {
    if let Some(pgid) = group {
        // SAFETY: kill(2) with a negative pid signals a process group; it has
        // no memory-safety preconditions.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
        // Best effort, and never blocking: nobody may be reading stderr, and
        // a guardian stuck in a write would never exit.
        if rc == 0 && ready(libc::STDERR_FILENO, libc::POLLOUT, 0).unwrap_or(false) {
            let _ = writeln!(
                io::stderr(),
                "quorumlock guardian: {why}; killed the command's process group {pgid}"
            );
        }
    }
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_little_endian() {
        let message = encode(Kind::Deadline, 0x0102_0304_0506_0708);
        assert_eq!(message[0], 2);
        assert_eq!(message[8], 0x08);
        assert_eq!(decode(&message), Some((Kind::Deadline, 0x0102_0304_0506_0708)));
        assert_eq!(decode(&encode(Kind::Group, 42)), Some((Kind::Group, 42)));
        assert_eq!(decode(&encode(Kind::StandDown, 0)), Some((Kind::StandDown, 0)));
    }

    #[test]
    fn unknown_kinds_are_refused() {
        let mut message = encode(Kind::Group, 1);
        message[0] = 9;
        assert_eq!(decode(&message), None);
    }

    #[test]
    fn deadlines_are_on_the_raw_monotonic_clock() {
        let ahead = std::time::Duration::from_secs(5);
        let before = mono_now_ns();
        let deadline = deadline_ns(Instant::now() + ahead);
        let after = mono_now_ns();
        let ahead = u64::try_from(ahead.as_nanos()).unwrap();
        assert!(deadline >= before + ahead - 1_000_000, "{deadline} vs {before}");
        assert!(deadline <= after + ahead, "{deadline} vs {after}");
    }
}
