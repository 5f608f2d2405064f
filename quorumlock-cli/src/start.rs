//! Starting the command under a held lock: the start rule, the guardian
//! first, then the command's process.
//!
//! The command starts only while the lock has more validity left than the
//! library's start margin (one renewal round, see
//! [`Guard::start_deadline`]) and than `--grace`. quorumlock checks it
//! before it starts anything, and the command's process checks it once
//! more as its last step before exec (see [`supervise::spawn`]): between
//! taking the lock and the exec, quorumlock may have been held up (stopped,
//! a stalled machine) for longer than the validity.

use std::ffi::OsString;
use std::io;
use std::process::{Child, ExitCode};
use std::time::Duration;

use quorumlock::Guard;
use tokio::time::{Instant, sleep_until};

use crate::duration::show;
use crate::guardian::{self, Guardian};
use crate::reap::Reaper;
use crate::supervise;
use crate::{exit, fail};

/// How long to wait for the guardian to exit after it was told to stand
/// down; it exits at once, so this only bounds a guardian that hangs.
const GUARDIAN_EXIT_WAIT: Duration = Duration::from_secs(1);

/// Starts the command under `guard`, with the guardian watching over it;
/// on failure, says why and returns the exit status.
///
/// The command starts only before the start deadline ([`start_deadline`]);
/// the last check is the child's own, right before exec (see
/// [`supervise::spawn`]).
pub(crate) async fn start(
    key: &str,
    command: &[OsString],
    guard: &Guard,
    grace: Duration,
) -> Result<(Child, Reaper, Guardian), ExitCode> {
    let start_by = start_deadline(guard, grace);
    let too_late = || {
        fail(
            exit::LOST,
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
                exit::INTERNAL,
                format!("cannot start the guardian process: {e}"),
            ));
        }
    };
    let spawned = supervise::spawn(
        command,
        &lock_env(guard),
        guardian.fd(),
        guardian::deadline_ns(start_by),
    );
    match spawned {
        Ok(child) => Ok((child, reaper, guardian)),
        Err(e) => {
            stand_down(&mut guardian, &mut reaper).await;
            if e.raw_os_error() == Some(supervise::TOO_LATE) {
                return Err(too_late());
            }
            let program = command[0].to_string_lossy();
            let code = match e.kind() {
                io::ErrorKind::NotFound => exit::NOT_FOUND,
                io::ErrorKind::PermissionDenied => exit::CANNOT_EXECUTE,
                _ => exit::INTERNAL,
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

/// What the command learns of its lock, in its environment (see
/// [`supervise::LockEnv`]).
fn lock_env(guard: &Guard) -> supervise::LockEnv {
    supervise::LockEnv {
        key: guard.resources().join(","),
        token: guard.token().to_owned(),
        fence: guard.fence_token(),
    }
}
