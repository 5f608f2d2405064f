//! Starting the command under a held lock: the start rule, the guardian
//! first, then the command's process, with its lock in its environment and
//! its own last steps between fork and exec.
//!
//! The command starts only while the lock has more validity left than the
//! library's start margin (one renewal round, see
//! [`Guard::start_deadline`]) and than `--grace`. quorumlock checks it
//! before it starts anything, and the command's process checks it once
//! more as its last step before exec (see [`spawn`]): between taking the
//! lock and the exec, quorumlock may have been held up (stopped, a stalled
//! machine) for longer than the validity.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode};
use std::time::Duration;

use quorumlock::Guard;
use tokio::time::{Instant, sleep_until};

use super::guardian::{self, Guardian, Kind, MESSAGE_LEN};
use super::reap::Reaper;
use super::sys::{self, Disposition};
use crate::duration::show;
use crate::exit::Exit;
use crate::fail;
use crate::nodes;

/// How long to wait for the guardian to exit after it was told to stand
/// down; it exits at once, so this only bounds a guardian that hangs.
const GUARDIAN_EXIT_WAIT: Duration = Duration::from_secs(1);

/// Starts the command under `guard`, with the guardian watching over it;
/// on failure, says why and returns the exit status.
///
/// The command starts only before the start deadline ([`start_deadline`]);
/// the last check is the child's own, right before exec (see [`spawn`]).
pub(crate) async fn start(
    key: &str,
    command: &[OsString],
    guard: &Guard,
    grace: Duration,
) -> Result<(Child, Reaper, Guardian), ExitCode> {
    let start_by = start_deadline(guard, grace);
    let too_late = || {
        fail(
            Exit::Lost,
            format!(
                "lock {:?} had less than {} of validity left when the command was to start \
                 (quorumlock was held up since taking it); the command did not run",
                key,
                show(guard.valid_until().saturating_duration_since(start_by))
            ),
        )
    };
    if Instant::now() >= start_by {
        return Err(too_late());
    }
    let (mut reaper, mut guardian) = match start_guardian(guard) {
        Ok(started) => started,
        Err(e) => {
            return Err(fail(
                Exit::Internal,
                format!("cannot start the guardian process: {e}"),
            ));
        }
    };
    let spawned = spawn(command, guard, &guardian, guardian::deadline_ns(start_by));
    match spawned {
        Ok(child) => Ok((child, reaper, guardian)),
        Err(e) => {
            stand_down(&mut guardian, &mut reaper).await;
            if e.raw_os_error() == Some(TOO_LATE) {
                return Err(too_late());
            }
            let program = command[0].to_string_lossy();
            let code = match e.kind() {
                io::ErrorKind::NotFound => Exit::NotFound,
                io::ErrorKind::PermissionDenied => Exit::CannotExecute,
                _ => Exit::Internal,
            };
            Err(fail(code, format!("cannot run {program}: {e}")))
        }
    }
}

/// The last instant at which the command may start: while the lock has more
/// validity left than its first renewal needs (the library's rule, see
/// [`Guard::start_deadline`]) and more than the grace period, below which
/// the supervisor would terminate it at once as a lock about to be lost.
fn start_deadline(guard: &Guard, grace: Duration) -> Instant {
    let by_grace = guard
        .valid_until()
        .checked_sub(grace)
        .unwrap_or_else(Instant::now);
    guard.start_deadline().min(by_grace)
}

/// Starts reaping, then the guardian, and tells it the lock's deadline.
fn start_guardian(guard: &Guard) -> io::Result<(Reaper, Guardian)> {
    let mut reaper = Reaper::new()?;
    let mut guardian = Guardian::spawn()?;
    reaper.watch(guardian.pid());
    // On failure the guardian is dropped with its pipe: it reads end of
    // file, has no group to kill, and exits.
    guardian.update(guard.valid_until())?;
    Ok((reaper, guardian))
}

/// Tells the guardian to exit and waits (bounded) until it is reaped.
pub(crate) async fn stand_down(guardian: &mut Guardian, reaper: &mut Reaper) {
    // A guardian that is already gone cannot be told; it is reaped all the same.
    let _ = guardian.stand_down();
    let until = Instant::now() + GUARDIAN_EXIT_WAIT;
    reaper.reap();
    while reaper.status(guardian.pid()).is_none() {
        tokio::select! {
            () = reaper.changed() => {}
            () = sleep_until(until) => return,
        }
    }
}

/// The variable that tells the command its lock's key.
const KEY_ENV: &str = "QUORUMLOCK_KEY";
/// The variable that tells the command its lock's token (the keys' value).
const LOCK_TOKEN_ENV: &str = "QUORUMLOCK_LOCK_TOKEN";
/// The variable that tells the command its fencing token, when the lock is fenced.
const FENCE_TOKEN_ENV: &str = "QUORUMLOCK_FENCE_TOKEN";

/// The error (errno) of a spawn refused because the start deadline had
/// passed: ETIME, "timer expired", which neither exec nor the other steps
/// before it report.
const TOO_LATE: i32 = libc::ETIME;

/// Starts the command in a new process group, killed if quorumlock dies
/// (PR_SET_PDEATHSIG), with its lock's key, token and fencing token in its
/// environment. Before exec, the child writes its group id to the guardian
/// itself, and then closes its copy of the guardian's pipe: the command
/// never runs before the guardian knows what to kill, and the guardian's
/// end of file still means that quorumlock died.
///
/// std's `spawn` returns only once the child has exec'd (or failed to), so
/// the group id cannot be forwarded by quorumlock before the command runs;
/// hence the child announces itself.
///
/// The child compares CLOCK_MONOTONIC with `start_by` (nanoseconds on that
/// clock) first and as the last thing before exec: when quorumlock was held
/// up so long since it took the lock that the start deadline passed, the
/// command is not executed and the spawn fails with [`TOO_LATE`]. Checked
/// any earlier, a stall between the check and the exec could still start
/// the command on a lapsed lock; a stall after it is the guardian's to end
/// (it knows the group by then, and kills it at the validity deadline).
fn spawn(command: &[OsString], guard: &Guard, guardian: &Guardian, start_by: u64) -> io::Result<Child> {
    let Some((program, args)) = command.split_first() else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let mut cmd = Command::new(program);
    cmd.args(args).process_group(0);
    for name in nodes::SECRET_ENV {
        cmd.env_remove(name);
    }
    cmd.env(KEY_ENV, guard.resources().join(","))
        .env(LOCK_TOKEN_ENV, guard.token());
    // An unfenced run under a fenced one must not pass the outer run's
    // token on as its own.
    match guard.fence_token() {
        Some(fence) => cmd.env(FENCE_TOKEN_ENV, fence.to_string()),
        None => cmd.env_remove(FENCE_TOKEN_ENV),
    };
    let parent = std::process::id();
    let pipe = guardian.pipe().as_raw_fd();
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls may be made: `before_exec` makes only those.
    // The descriptor is the child's copy of quorumlock's open pipe to the
    // guardian, inherited through fork; in the child nothing else uses or
    // closes it (the parent's writer is never dropped there: exec replaces
    // the process, or it exits), so the child may own and close it. The hook
    // runs once per spawn.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || before_exec(parent, io::PipeWriter::from_raw_fd(pipe), start_by));
    }
    cmd.spawn()
}

/// What the command's process does between fork and exec (see [`spawn`]).
///
/// Async-signal-safe, as everything there must be: the `sys` calls and
/// `std::process::id`/`parent_id` make one system call each, a write to and
/// the drop (close) of the pipe are one system call each, and the message
/// and the errors are built on the stack.
fn before_exec(parent: u32, mut guardian: io::PipeWriter, start_by: u64) -> io::Result<()> {
    sys::die_with_parent()?;
    // The parent may have died before that took effect.
    if std::os::unix::process::parent_id() != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // Too late already: the guardian is not told of a group that will never
    // run, so the spawn fails with TOO_LATE, not a kill.
    if sys::mono_now_ns() >= start_by {
        return Err(io::Error::from_raw_os_error(TOO_LATE));
    }
    let pid = std::process::id();
    // std puts the child in its group before running this hook; never
    // announce another group (quorumlock's) to the guardian.
    if sys::own_group() != pid {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    let message = guardian::encode(Kind::Group, u64::from(pid));
    // A dead guardian must fail the spawn (EPIPE), not kill the child with
    // SIGPIPE, which std would take for a successful exec.
    sys::set_disposition(libc::SIGPIPE, Disposition::Ignore);
    let written = guardian.write(&message);
    sys::set_disposition(libc::SIGPIPE, Disposition::Default);
    // Never short: a write of at most PIPE_BUF bytes to a pipe is atomic.
    if written? != MESSAGE_LEN {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    drop(guardian);
    // And once more as the very last step: a stall since the first check
    // must not start the command either.
    if sys::mono_now_ns() >= start_by {
        return Err(io::Error::from_raw_os_error(TOO_LATE));
    }
    Ok(())
}
