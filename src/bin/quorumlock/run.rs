//! `quorumlock run`: run a command only while holding a lock, like flock(1)
//! across machines.
//!
//! The command runs in its own process group, so that the whole tree it
//! starts can be signalled. While it runs, the client's watchdog renews the
//! lock every ttl/3. The command is terminated (SIGTERM to its group, SIGKILL
//! `--grace` later) as soon as either
//! - the lock is lost (another owner on a majority, or its validity passed), or
//! - renewal has not been confirmed for so long that less than `--grace` of
//!   validity is left. Stopping then, rather than at the loss, means a command
//!   that needs its whole grace period is dead before the lock can pass to
//!   someone else when nodes fail; only a sudden loss (a majority reporting
//!   another owner) can leave an overlap, of at most the grace period.
//!
//! Signals sent to quorumlock (INT, TERM, HUP, QUIT) are forwarded to the
//! command's group; quorumlock keeps the lock until the command has exited.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use quorumlock::{DEFAULT_TTL, Error, Guard, LockOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use crate::duration::{self, show};
use crate::{Nodes, exit, fail};

/// The grace period when `--grace` is not given (and the ttl allows it):
/// long enough for a command to flush and close what it has open, short
/// enough that a stuck command does not hold the lock for long after a loss.
/// With a ttl under 20 s, half the ttl is used instead.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

const RUN_HELP: &str = "\
Examples:
  # crontab: the nightly archive runs on one machine of the fleet; the others skip it
  0 3 * * * quorumlock run --key archive:nightly --wait 2s -- /usr/local/bin/archive
  # wait up to 2 minutes for a busy lock, renew a 1-minute ttl while the job runs
  quorumlock run --key reindex --ttl 1m --wait 2m --nodes redis://a:6379,redis://b:6379,redis://c:6379 -- ./reindex.sh

The command runs in its own process group and should not read from the terminal.";

/// Options of `quorumlock run`.
#[derive(clap::Args, Debug)]
#[command(after_help = RUN_HELP)]
pub(crate) struct Args {
    /// The lock's resource name (the Redis key on every node).
    #[arg(long, value_name = "KEY")]
    key: String,
    /// Lock ttl: how long the lock outlives a crashed quorumlock; renewed every ttl/3 [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    ttl: Option<Duration>,
    /// How long to wait while another owner holds the lock; 0 makes one attempt.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10s")]
    wait: Duration,
    /// Time between SIGTERM and SIGKILL when the lock is lost; at most half the ttl
    /// [default: 10s, or half the ttl if that is less]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    grace: Option<Duration>,
    /// Report acquisition, release and termination on stderr.
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    nodes: Nodes,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// The ttl and grace period to use, or the usage error to print. Only flags
/// the user gave are named in the error.
fn timing(args: &Args) -> Result<(Duration, Duration), String> {
    let ttl = args.ttl.unwrap_or(DEFAULT_TTL);
    let Some(grace) = args.grace else {
        return Ok((ttl, DEFAULT_GRACE.min(ttl / 2)));
    };
    if grace * 2 > ttl {
        let ttl_given = match args.ttl {
            Some(_) => format!("--ttl {}", show(ttl)),
            None => format!("the ttl, {} (default)", show(ttl)),
        };
        return Err(format!(
            "--grace {} must be at most half of {ttl_given}: the command is stopped when less than \
             the grace period of validity is left, which must come after the first renewal; \
             give a longer --ttl or a shorter --grace",
            show(grace)
        ));
    }
    Ok((ttl, grace))
}

pub(crate) async fn run(args: Args) -> ExitCode {
    if args.key.is_empty() {
        return fail(exit::USAGE, "--key must not be empty");
    }
    let (ttl, grace) = match timing(&args) {
        Ok(timing) => timing,
        Err(message) => return fail(exit::USAGE, message),
    };
    let mut options = LockOptions::new().wait(args.wait);
    if args.wait.is_zero() {
        options = options.max_attempts(1);
    }
    let redlock = match args.nodes.builder().map(|b| b.options(options).build()) {
        Ok(Ok(redlock)) => redlock,
        Ok(Err(e)) => return fail(exit::USAGE, e),
        Err(message) => return fail(exit::USAGE, message),
    };
    // Catch signals from now on: an interrupted wait must not leave the
    // process killed mid-request, and a running command gets them forwarded.
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => return fail(exit::INTERNAL, format!("cannot install signal handlers: {e}")),
    };
    let guard = tokio::select! {
        result = redlock.lock(args.key.as_str(), ttl) => match result {
            Ok(guard) => guard,
            Err(e) => return lock_failed(&args, &e),
        },
        signo = signals.next() => {
            return fail(128 + signo as u8, format!("interrupted (signal {signo}) while waiting for lock {:?}", args.key));
        }
    };
    if args.verbose {
        eprintln!(
            "quorumlock: acquired {:?} (majority {} of {} nodes), valid for {}",
            args.key,
            redlock.quorum(),
            redlock.nodes(),
            show(guard.remaining())
        );
    }
    let mut child = match spawn(&args.command) {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            let program = args.command[0].to_string_lossy();
            let code = match e.kind() {
                io::ErrorKind::NotFound => exit::NOT_FOUND,
                io::ErrorKind::PermissionDenied => exit::CANNOT_EXECUTE,
                _ => exit::INTERNAL,
            };
            return fail(code, format!("cannot run {program}: {e}"));
        }
    };
    let (status, termination) = supervise(&mut child, &guard, &mut signals, grace).await;
    let status = match status {
        Ok(status) => status,
        Err(e) => return fail(exit::INTERNAL, format!("waiting for the command failed: {e}")),
    };
    if let Some(reason) = termination {
        // Give back what is left of the lock (nothing, if it was lost).
        if guard.is_held() {
            let _ = guard.release().await;
        }
        return fail(
            exit::LOST,
            format!(
                "lock {:?} {reason}; the command was terminated ({status})",
                args.key
            ),
        );
    }
    if !guard.is_held() {
        eprintln!(
            "quorumlock: warning: lock {:?} was lost around the time the command ended",
            args.key
        );
    }
    match guard.release().await {
        Ok(report) if args.verbose => {
            eprintln!(
                "quorumlock: released {:?} on {} of {} nodes",
                args.key, report.confirmed, report.nodes
            )
        }
        Ok(_) => {}
        Err(e) => eprintln!(
            "quorumlock: warning: release of {:?} failed ({e}); it expires within {}",
            args.key,
            show(ttl)
        ),
    }
    ExitCode::from(code_of(status))
}

/// The exit status and message for a lock that could not be taken.
fn lock_failed(args: &Args, error: &Error) -> ExitCode {
    let code = match error {
        Error::Held { .. } => exit::BUSY,
        Error::Config(_) => exit::USAGE,
        Error::Unreachable { .. } | Error::ValidityUsedUp { .. } => exit::UNREACHABLE,
        _ => exit::INTERNAL,
    };
    let waited = if args.wait.is_zero() {
        "one attempt".to_owned()
    } else {
        format!("waited {}", show(args.wait))
    };
    match code {
        exit::BUSY => fail(code, format!("lock {:?} is busy ({waited}): {error}", args.key)),
        exit::USAGE => fail(code, error),
        _ => fail(
            code,
            format!("cannot take lock {:?} ({waited}): {error}", args.key),
        ),
    }
}

/// Starts the command in a new process group. On Linux it is also set to
/// be killed if quorumlock dies, so that it never outlives the renewals.
fn spawn(command: &[OsString]) -> io::Result<Child> {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: prctl and getppid are async-signal-safe and touch no memory
        // of the parent; nothing here allocates or takes locks.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() as u32 != parent {
                    return Err(io::Error::other("quorumlock exited before the command started"));
                }
                Ok(())
            });
        }
    }
    cmd.spawn()
}

/// Waits for the command, forwarding signals and terminating it when the
/// lock is lost or about to be. Returns its status and, if it was
/// terminated, why.
async fn supervise(
    child: &mut Child,
    guard: &Guard,
    signals: &mut Signals,
    grace: Duration,
) -> (io::Result<ExitStatus>, Option<String>) {
    let group = child.id().expect("a child that was not waited for has a pid");
    let mut termination: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let stop_at = guard.valid_until().checked_sub(grace).unwrap_or(now);
        tokio::select! {
            biased;
            status = child.wait() => {
                if termination.is_some() {
                    // Members of the group that outlived its leader.
                    signal_group(group, libc::SIGKILL);
                }
                return (status, termination);
            }
            signo = signals.next() => signal_group(group, signo),
            () = guard.lost(), if termination.is_none() => {
                termination = Some("was lost".to_owned());
                kill_at = Some(terminate(group, grace));
            }
            () = sleep_until(stop_at), if termination.is_none() => {
                // Renewal may have moved the validity meanwhile.
                if guard.valid_until().checked_sub(grace).is_none_or(|at| at <= Instant::now()) {
                    termination = Some(format!(
                        "was not confirmed by a majority of nodes and had {} of validity left",
                        show(grace)
                    ));
                    kill_at = Some(terminate(group, grace));
                }
            }
            () = sleep_until(kill_at.unwrap_or(now)), if kill_at.is_some() => {
                signal_group(group, libc::SIGKILL);
                kill_at = None;
            }
        }
    }
}

/// Sends SIGTERM to the group and returns when SIGKILL is due.
fn terminate(group: u32, grace: Duration) -> Instant {
    signal_group(group, libc::SIGTERM);
    Instant::now() + grace
}

/// Sends `signo` to every process of the group led by the command. Errors
/// (the group is gone) are ignored: there is nothing left to signal.
fn signal_group(group: u32, signo: i32) {
    let Ok(pgid) = libc::pid_t::try_from(group) else {
        return;
    };
    // SAFETY: kill(2) with a negative pid signals a process group; it has no
    // memory-safety preconditions. The group id is the pid of our own child,
    // which is not reaped (and so not reused) while we may signal it.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-pgid, signo);
    }
}

/// The exit status to pass on: the command's code, or 128 + the signal that
/// killed it (as shells report it).
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::INTERNAL),
        (None, Some(signo)) => u8::try_from(128 + signo).unwrap_or(exit::INTERNAL),
        (None, None) => exit::INTERNAL,
    }
}

/// The signals quorumlock forwards to the command.
struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    fn new() -> io::Result<Self> {
        let kinds = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
        ];
        let streams = kinds
            .into_iter()
            .map(|(signo, kind)| Ok((signo, signal(kind)?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received (cancel safe).
    async fn next(&mut self) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    fn timing_of(flags: &[&str]) -> Result<(Duration, Duration), String> {
        let argv = ["run", "--key", "k"].iter().chain(flags).chain(&["--", "true"]);
        timing(&Wrapper::try_parse_from(argv).expect("parses").args)
    }

    #[test]
    fn signal_deaths_become_128_plus_the_signal() {
        assert_eq!(code_of(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(code_of(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(code_of(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }

    #[test]
    fn the_default_grace_never_conflicts_with_the_ttl() {
        let s = Duration::from_secs;
        assert_eq!(timing_of(&[]), Ok((DEFAULT_TTL, DEFAULT_GRACE)));
        assert_eq!(timing_of(&["--ttl", "2s"]), Ok((s(2), s(1))));
        assert_eq!(timing_of(&["--ttl", "1m"]), Ok((s(60), DEFAULT_GRACE)));
        assert_eq!(timing_of(&["--ttl", "2s", "--grace", "1s"]), Ok((s(2), s(1))));
    }

    #[test]
    fn a_too_long_grace_names_only_the_flags_given() {
        let error = timing_of(&["--ttl", "2s", "--grace", "3s"]).unwrap_err();
        assert!(
            error.contains("--grace 3s") && error.contains("--ttl 2s"),
            "{error}"
        );
        let error = timing_of(&["--grace", "20s"]).unwrap_err();
        assert!(
            error.contains("--grace 20s") && error.contains("30s (default)"),
            "{error}"
        );
        assert!(!error.contains("--ttl 30s"), "{error}");
    }
}
