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
//!   itself, between fork and exec (see `start::spawn`), so the guardian
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
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use super::sys::{self, Disposition, Readiness};
use crate::nodes;

/// Bytes in one message: the kind, then the value.
pub(crate) const MESSAGE_LEN: usize = 16;

/// The argument that makes the binary run as a guardian.
const ARGUMENT: &str = "__guardian";

/// Whether this process is a guardian: the binary run with [`ARGUMENT`]
/// as its one argument.
pub(crate) fn is_invoked() -> bool {
    let mut args = std::env::args_os().skip(1);
    args.next().is_some_and(|arg| arg == ARGUMENT) && args.next().is_none()
}

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

/// `valid_until` (tokio's monotonic clock) as a CLOCK_MONOTONIC deadline.
pub(crate) fn deadline_ns(valid_until: Instant) -> u64 {
    // The raw clock is read first: the deadline then comes out a little
    // early rather than late, so the guardian never trusts a lapsed lock.
    let mono = sys::mono_now_ns();
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
        sys::set_nonblocking(writer.as_fd())?;
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
    pub(crate) fn pipe(&self) -> BorrowedFd<'_> {
        self.pipe.as_fd()
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
        .arg(ARGUMENT)
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
        sys::set_disposition(signo, Disposition::Ignore);
    }
    // Read unbuffered, from a descriptor of its own: std's stdin buffers, and
    // could hold messages that poll would then not report.
    let Ok(mut pipe) = io::stdin().as_fd().try_clone_to_owned().map(File::from) else {
        return kill(None, status::BROKEN, "cannot read its pipe");
    };
    let mut group: Option<u32> = None;
    let mut deadline: Option<u64> = None;
    // The deadline passed while no group was known.
    let mut lapsed = false;
    let mut message = [0u8; MESSAGE_LEN];
    let mut filled = 0;
    loop {
        let timeout = match deadline {
            None => None,
            Some(at) => {
                let now = sys::mono_now_ns();
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
                Some(Duration::from_nanos(at - now))
            }
        };
        match sys::ready(pipe.as_fd(), Readiness::Readable, timeout) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(_) => return kill(group, status::BROKEN, "cannot poll its pipe"),
        }
        match pipe.read(&mut message[filled..]) {
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
            Some((Kind::Group, pgid)) => match command_group(pgid) {
                Some(pgid) => {
                    group = Some(pgid);
                    if lapsed {
                        return kill(group, status::DEADLINE, LAPSED);
                    }
                }
                None => return kill(group, status::BROKEN, "was sent a bad process group"),
            },
            None => return kill(group, status::BROKEN, "was sent an unknown message"),
        }
    }
}

/// The announced group, if it can be the command's: a process id, and
/// neither init's group (1) nor the guardian's own, which would be a mistake.
fn command_group(raw: u64) -> Option<u32> {
    let pgid = u32::try_from(libc::pid_t::try_from(raw).ok()?).ok()?;
    (pgid > 1 && pgid != sys::own_group()).then_some(pgid)
}

/// Kills the command's group (if known), says why on stderr, and returns
/// `code` as the exit status.
fn kill(group: Option<u32>, code: u8, why: &str) -> ExitCode {
    if let Some(pgid) = group {
        // Best effort, and never blocking: nobody may be reading stderr, and
        // a guardian stuck in a write would never exit.
        if sys::signal_group(pgid, libc::SIGKILL)
            && sys::ready(io::stderr().as_fd(), Readiness::Writable, Some(Duration::ZERO)).unwrap_or(false)
        {
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
        let before = sys::mono_now_ns();
        let deadline = deadline_ns(Instant::now() + ahead);
        let after = sys::mono_now_ns();
        let ahead = u64::try_from(ahead.as_nanos()).unwrap();
        assert!(deadline >= before + ahead - 1_000_000, "{deadline} vs {before}");
        assert!(deadline <= after + ahead, "{deadline} vs {after}");
    }
}
