//! Starting the command and watching over its process group while the lock
//! is held: forwarding signals, terminating on loss, job control, and
//! waiting until no process of the group is left.

use std::ffi::OsString;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use quorumlock::Guard;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Instant, sleep, sleep_until};

use crate::duration::show;
use crate::exit;
use crate::guardian::{self, Guardian, Kind};
use crate::nodes;
use crate::reap::{Reaper, group_alive, signal_group, stop_self};

/// How often to look whether the command's group is empty once its leader
/// has exited: the other members need not be our children, so their exits
/// send us no SIGCHLD.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// The guardian's deadline is refreshed this many times per ttl. Renewals
/// come every ttl/3 and leave about 2/3 of the ttl before the previous
/// deadline, so a refresh within ttl/10 always reaches the guardian in time.
const DEADLINE_REFRESHES_PER_TTL: u32 = 10;

/// The shortest refresh period, so that a tiny ttl cannot make the loop spin.
const MIN_DEADLINE_REFRESH: Duration = Duration::from_millis(1);

/// The error (errno) of a spawn refused because the start deadline had
/// passed: ETIME, "timer expired", which neither exec nor the other steps
/// before it report.
pub(crate) const TOO_LATE: i32 = libc::ETIME;

/// The variables that tell the command about its lock.
pub(crate) const KEY_ENV: &str = "QUORUMLOCK_KEY";
pub(crate) const LOCK_TOKEN_ENV: &str = "QUORUMLOCK_LOCK_TOKEN";
pub(crate) const FENCE_TOKEN_ENV: &str = "QUORUMLOCK_FENCE_TOKEN";

/// What the command learns of the lock it runs under.
#[derive(Debug)]
pub(crate) struct LockEnv {
    /// The lock's key.
    pub(crate) key: String,
    /// The lock's random token (the keys' value).
    pub(crate) token: String,
    /// The fencing token, when the lock is fenced.
    pub(crate) fence: Option<u64>,
}

/// Starts the command in a new process group, killed if quorumlock dies
/// (PR_SET_PDEATHSIG). Before exec, the child writes its group id to the
/// guardian itself, and then closes its copy of the guardian's pipe: the
/// command never runs before the guardian knows what to kill, and the
/// guardian's end of file still means that quorumlock died.
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
pub(crate) fn spawn(
    command: &[OsString],
    lock: &LockEnv,
    guardian: RawFd,
    start_by: u64,
) -> io::Result<std::process::Child> {
    let Some((program, args)) = command.split_first() else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let mut cmd = Command::new(program);
    cmd.args(args).process_group(0);
    for name in nodes::SECRET_ENV {
        cmd.env_remove(name);
    }
    cmd.env(KEY_ENV, &lock.key).env(LOCK_TOKEN_ENV, &lock.token);
    // An unfenced run under a fenced one must not pass the outer run's
    // token on as its own.
    match lock.fence {
        Some(fence) => cmd.env(FENCE_TOKEN_ENV, fence.to_string()),
        None => cmd.env_remove(FENCE_TOKEN_ENV),
    };
    let parent = std::process::id();
    // SAFETY: everything in the closure is async-signal-safe: libc calls
    // (prctl, getppid, getpid, getpgrp, signal, write, close, clock_gettime) on integers
    // and a stack buffer, and io::Error values built from errno, which do
    // not allocate. The descriptor is quorumlock's open pipe, inherited
    // through fork; closing it affects only the child.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Too late already: the guardian is not told of a group that
            // will never run, so the spawn fails with TOO_LATE, not a kill.
            if guardian::mono_now_ns() >= start_by {
                return Err(io::Error::from_raw_os_error(TOO_LATE));
            }
            let pid = libc::getpid();
            // std puts the child in its group before running this closure;
            // never announce another group (quorumlock's) to the guardian.
            if libc::getpgrp() != pid {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            let message = guardian::encode(Kind::Group, pid as u64);
            // A dead guardian must fail the spawn (EPIPE), not kill the
            // child with SIGPIPE, which std would take for a successful exec.
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            let written = libc::write(guardian, message.as_ptr().cast(), message.len());
            let error = io::Error::last_os_error();
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            if written != message.len() as isize {
                return Err(error);
            }
            libc::close(guardian);
            // And once more as the very last step: a stall since the first
            // check must not start the command either.
            if guardian::mono_now_ns() >= start_by {
                return Err(io::Error::from_raw_os_error(TOO_LATE));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The signals quorumlock handles itself.
pub(crate) struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    pub(crate) fn new() -> io::Result<Self> {
        let kinds = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
            (libc::SIGTSTP, SignalKind::from_raw(libc::SIGTSTP)),
        ];
        let streams = kinds
            .into_iter()
            .map(|(signo, kind)| Ok((signo, signal(kind)?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received (cancel safe).
    pub(crate) async fn next(&mut self) -> i32 {
        let waits = self.streams.iter_mut().map(|(signo, stream)| {
            let signo = *signo;
            Box::pin(async move {
                stream.recv().await;
                signo
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// How the command's group ended.
pub(crate) struct Ending {
    /// The exit status of the command (the group's leader).
    pub(crate) status: ExitStatus,
    /// Set when quorumlock terminated the group for its own reasons: the exit
    /// status to return instead of the command's, and why.
    pub(crate) termination: Option<(u8, String)>,
}

/// What the supervisor watches over.
pub(crate) struct Job<'a> {
    pub(crate) group: u32,
    pub(crate) guard: &'a Guard,
    pub(crate) guardian: &'a mut Guardian,
    pub(crate) reaper: &'a mut Reaper,
    pub(crate) signals: &'a mut Signals,
    pub(crate) grace: Duration,
    pub(crate) ttl: Duration,
    pub(crate) verbose: bool,
}

impl Job<'_> {
    /// Runs until the command has exited and no process of its group is
    /// left, forwarding signals and terminating the group when the lock is
    /// lost or about to be, or when the guardian fails.
    pub(crate) async fn supervise(&mut self) -> Ending {
        let group = self.group;
        let grace = self.grace;
        let refresh = (self.ttl / DEADLINE_REFRESHES_PER_TTL).max(MIN_DEADLINE_REFRESH);
        let mut next_refresh = Instant::now() + refresh;
        let mut termination: Option<(u8, String)> = None;
        let mut kill_at: Option<Instant> = None;
        // Once SIGKILL is due, it is sent again on every look at the group,
        // for a process forked while the first one was being delivered.
        let mut killing = false;
        let mut leftovers_seen = false;
        self.reaper.reap();
        loop {
            if termination.is_none()
                && !self.guardian.stood_down()
                && let Some(status) = self.reaper.status(self.guardian.pid())
            {
                termination = Some(guardian_ended(status));
                terminate(group, grace, &mut kill_at);
            }
            if let Some(status) = self.reaper.status(group) {
                if !group_alive(group) {
                    return Ending { status, termination };
                }
                if killing {
                    signal_group(group, libc::SIGKILL);
                }
                if !leftovers_seen {
                    leftovers_seen = true;
                    if self.verbose {
                        crate::say!(
                            "quorumlock: the command exited and left processes in its group; \
                             terminating them before the release"
                        );
                    }
                    terminate(group, grace, &mut kill_at);
                }
            }
            let now = Instant::now();
            let stop_at = self.guard.valid_until().checked_sub(grace).unwrap_or(now);
            let leader_gone = self.reaper.status(group).is_some();
            tokio::select! {
                biased;
                () = self.reaper.changed() => {}
                signo = self.signals.next() => {
                    if signo == libc::SIGTSTP {
                        if let Some(reason) = self.stop_and_resume() {
                            termination.get_or_insert((exit::LOST, reason));
                            killing = true;
                        }
                    } else {
                        signal_group(group, signo);
                        // A command that ignores the signal must not keep the lock forever.
                        arm(&mut kill_at, Instant::now() + grace);
                    }
                }
                () = self.guard.lost(), if termination.is_none() => {
                    termination = Some((exit::LOST, "was lost".to_owned()));
                    terminate(group, grace, &mut kill_at);
                }
                () = sleep_until(stop_at), if termination.is_none() => {
                    // Renewal may have moved the validity meanwhile.
                    if self.guard.valid_until().checked_sub(grace).is_none_or(|at| at <= Instant::now()) {
                        termination = Some((exit::LOST, format!(
                            "was not confirmed by a majority of nodes and had {} of validity left",
                            show(grace)
                        )));
                        terminate(group, grace, &mut kill_at);
                    }
                }
                () = sleep_until(kill_at.unwrap_or(now)), if kill_at.is_some() && !killing => {
                    signal_group(group, libc::SIGKILL);
                    killing = true;
                }
                () = sleep_until(next_refresh) => {
                    next_refresh = Instant::now() + refresh;
                    if let Err(e) = self.guardian.update(self.guard.valid_until())
                        && termination.is_none()
                    {
                        termination = Some((exit::INTERNAL, format!("cannot reach the guardian ({e})")));
                        terminate(group, grace, &mut kill_at);
                    }
                }
                () = sleep(GROUP_POLL), if leader_gone => {}
            }
        }
    }

    /// Ctrl-Z: stops the command's group, then quorumlock itself, so that the
    /// shell's job control works. Once continued, the group continues only if
    /// the lock is still held with more than the grace period left;
    /// otherwise it is killed, and the reason returned.
    fn stop_and_resume(&mut self) -> Option<String> {
        signal_group(self.group, libc::SIGSTOP);
        stop_self();
        if self.guard.is_held() && self.guard.remaining() > self.grace {
            signal_group(self.group, libc::SIGCONT);
            return None;
        }
        // SIGKILL first: continued before it, the command would run again
        // on a lock whose validity may have passed.
        signal_group(self.group, libc::SIGKILL);
        signal_group(self.group, libc::SIGCONT);
        Some(format!(
            "had less than {} of validity left when quorumlock was continued",
            show(self.grace)
        ))
    }
}

/// The exit status and reason for a guardian that exited on its own.
pub(crate) fn guardian_ended(status: ExitStatus) -> (u8, String) {
    match status.code().and_then(|c| u8::try_from(c).ok()) {
        Some(guardian::status::DEADLINE) => (
            exit::LOST,
            "passed its validity deadline without renewal (quorumlock was stopped or stalled)".to_owned(),
        ),
        _ => (
            exit::INTERNAL,
            format!("is no longer guarded: the guardian process ended ({status})"),
        ),
    }
}

/// Sends SIGTERM to the group and has SIGKILL follow after the grace
/// period (or earlier, if it already was due earlier).
fn terminate(group: u32, grace: Duration, kill_at: &mut Option<Instant>) {
    signal_group(group, libc::SIGTERM);
    arm(kill_at, Instant::now() + grace);
}

/// Makes SIGKILL due at `at`, unless it already is earlier.
fn arm(kill_at: &mut Option<Instant>, at: Instant) {
    *kill_at = Some(kill_at.map_or(at, |due| due.min(at)));
}
