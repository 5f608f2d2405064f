//! `quorumlock run`: run a command only while holding a lock, like flock(1)
//! across machines.
//!
//! The command runs in its own process group, so that the whole tree it
//! starts can be signalled. While it runs, the client's watchdog renews the
//! lock every ttl/3. The command's group is terminated (SIGTERM, SIGKILL
//! `--grace` later) as soon as either
//! - the lock is lost (another owner on a majority, or its validity passed), or
//! - renewal has not been confirmed for so long that less than `--grace` of
//!   validity is left. Stopping then, rather than at the loss, means a command
//!   that needs its whole grace period is dead before the lock can pass to
//!   someone else when nodes fail; only a sudden loss (a majority reporting
//!   another owner) can leave an overlap, of at most the grace period.
//!
//! The command starts only while the lock has more validity left than
//! `--grace` and one renewal round (see [`start`]), checked by the
//! command's process itself right before exec; when quorumlock was held up
//! since taking the lock, the command does not run (exit 79).
//!
//! No process of the command outlives the lock, whatever ends quorumlock:
//! - A guardian process (see [`guardian`]) kills the command's group
//!   when quorumlock dies (SIGKILL, the OOM killer) or stops renewing in time
//!   (SIGSTOP, a hang): it is told the lock's validity deadline after every
//!   renewal.
//! - After the command exits, processes left in its group (a `&` job) get
//!   SIGTERM, then SIGKILL after `--grace`; the lock is kept, and renewed,
//!   until the group is empty, and released only then.
//! - quorumlock is a child subreaper and reaps every child (see
//!   [`reap`]), so orphans of the command leave no zombies, also when
//!   quorumlock is PID 1 in a container. Processes that leave the group
//!   (`setsid`, `setpgid`) are out of its reach.
//!
//! Signals: INT, TERM, HUP and QUIT are forwarded to the command's group,
//! and SIGKILL follows `--grace` later, so that a command that ignores them
//! cannot keep the lock forever; quorumlock keeps the lock until the group
//! has ended and passes the command's status through. While waiting for the
//! lock, they end the wait (exit 128+signal). SIGTSTP (Ctrl-Z) stops the
//! command's group, then quorumlock; once continued, the group continues only
//! if the lock is still held with more than `--grace` of validity left, and
//! is killed otherwise (exit 79): the command never runs while the lock's
//! validity may have passed. The guardian enforces the same while
//! quorumlock is stopped.

pub(crate) mod guardian;
mod help;
mod metrics_file;
mod reap;
mod start;
mod supervise;
mod sys;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use quorumlock::{DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_TTL, Error, Guard, LockOptions, Redlock};
use tokio::time::Instant;

use crate::duration::{self, show};
use crate::exit::{self, Exit};
use crate::{Nodes, fail};
use metrics_file::Timeline;
use supervise::{Ending, Job, Signals, Termination};

/// The grace period when `--grace` is not given (and the ttl allows it):
/// long enough for a command to flush and close what it has open, short
/// enough that a stuck command does not hold the lock for long after a loss.
/// With a ttl under 20 s, half the ttl is used instead.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Options of `quorumlock run`.
#[derive(clap::Args, Debug)]
#[command(after_help = help::run_help())]
pub(crate) struct Args {
    /// The lock's resource name (the Redis key on every node).
    #[arg(long, value_name = "KEY")]
    key: String,
    /// Lock ttl: how long the lock outlives a crashed quorumlock; renewed every ttl/3 [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    ttl: Option<Duration>,
    /// How long to wait while another owner holds the lock; 0 makes one attempt.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration::parse,
        default_value = "10s",
        env = "QUORUMLOCK_WAIT"
    )]
    wait: Duration,
    /// Time between SIGTERM and SIGKILL when the command's group is terminated; at most half
    /// the ttl [default: 10s, or half the ttl if that is less; on ZooKeeper at most a quarter of
    /// the validity its session grants, two thirds of the session timeout]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    grace: Option<Duration>,
    /// Keep the lock for at least this long after it was taken: a command that ends
    /// sooner leaves the key to expire then, so that machines still waiting give up
    /// rather than run the command again (once per period from every crontab)
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    min_hold: Option<Duration>,
    /// Take a fenced lock and pass its fencing token to the command as
    /// QUORUMLOCK_FENCE_TOKEN (on Redis nodes usually in the round trips of
    /// a plain lock, at most one more).
    #[arg(long)]
    fenced: bool,
    /// Report acquisition, release and termination on stderr.
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    nodes: Nodes,
    #[command(flatten)]
    metrics: metrics_file::MetricsArgs,
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
    if grace.saturating_mul(2) > ttl {
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
        return fail(Exit::Usage, "--key must not be empty");
    }
    let (ttl, grace) = match timing(&args) {
        Ok(timing) => timing,
        Err(message) => return fail(Exit::Usage, message),
    };
    // Before the client exists, so that the file has all the library counts.
    let metrics = match args.metrics.install() {
        Ok(metrics) => metrics,
        Err(code) => return code,
    };
    let mut options = LockOptions::new().wait(args.wait).fenced(args.fenced);
    if args.wait.is_zero() {
        options = options.max_attempts(1);
    }
    if let Some(hold) = args.min_hold {
        options = options.min_hold(hold);
    }
    let resolved = args.nodes.resolve();
    let session_bound = resolved
        .as_ref()
        .is_ok_and(|nodes| matches!(nodes.urls.as_slice(), [url] if crate::nodes::is_zookeeper(url)));
    let built = resolved.and_then(|nodes| nodes.builder());
    let redlock = match built.map(|b| b.options(options).build()) {
        Ok(Ok(redlock)) => redlock,
        Ok(Err(e)) => return fail(Exit::Usage, e),
        Err(message) => return fail(Exit::Usage, message),
    };
    let mut timeline = Timeline::new();
    let code = hold(&args, &redlock, (ttl, grace), session_bound, &mut timeline).await;
    let code = finish(&redlock, code).await;
    if let Some(metrics) = metrics {
        metrics.write(&timeline, code);
    }
    code
}

/// The one way out of `run` once the client exists, so that nothing the
/// client still does in the background is lost at exit: the undo of a
/// refused or interrupted attempt, the waiter's queue entries, a release
/// still on its way.
async fn finish(redlock: &Redlock, code: ExitCode) -> ExitCode {
    let report = redlock.shutdown(DEFAULT_SHUTDOWN_TIMEOUT).await;
    if !report.is_complete() {
        crate::say!("quorumlock: warning: at exit, {report}; those keys expire with their ttl");
    }
    code
}

/// Takes the lock, runs the command under it, and gives the lock back.
/// The default grace on a ZooKeeper session is the validity granted divided
/// by this. The heartbeat renews a lock once half of that validity is left
/// (a third of the ttl comes later), so the grace must stay below a half,
/// with room for the round itself: a quarter leaves it the other quarter,
/// where Redis's rule (a renewal at two thirds of the ttl left, a grace of
/// at most half) leaves a sixth.
const SESSION_GRACE_DIVISOR: u32 = 4;

/// The period a renewal vouches for and the grace period, for `guard`.
///
/// A ZooKeeper lock is valid for a share of the session timeout (two thirds
/// of 10 s by default) when that is shorter than the ttl: the guardian's
/// deadline must then be refreshed at that pace rather than the ttl's, and
/// the default grace, made for the ttl, would leave the command no time to
/// start, or stop it before a heartbeat. A --grace given is the user's to
/// fit.
///
/// Checked right after the acquisition, so that a stall later (the verbose
/// line, the fork) is told apart: a grace that is not less than the
/// validity the lock was granted is a usage error, said here.
fn fit_to_session(
    args: &Args,
    guard: &Guard,
    (ttl, grace): (Duration, Duration),
    session_bound: bool,
) -> Result<(Duration, Duration), ExitCode> {
    let granted = guard.remaining();
    let (period, grace) = if session_bound {
        let period = granted.min(ttl);
        let fitted = grace.min(period / SESSION_GRACE_DIVISOR);
        (period, args.grace.unwrap_or(fitted))
    } else {
        (ttl, grace)
    };
    if grace >= granted {
        return Err(fail(
            Exit::Usage,
            format!(
                "--grace {} is not less than the {} of validity lock {:?} was granted; the \
                 command did not run: give a shorter --grace",
                show(grace),
                show(granted),
                args.key
            ),
        ));
    }
    Ok((period, grace))
}

/// Holds the lock while the command runs. `session_bound`: the lock lives in
/// a ZooKeeper session, whose timeout may grant less validity than the ttl.
async fn hold(
    args: &Args,
    redlock: &Redlock,
    (ttl, grace): (Duration, Duration),
    session_bound: bool,
    timeline: &mut Timeline,
) -> ExitCode {
    // Catch signals from now on: an interrupted wait must not leave the
    // process killed mid-request, and a running command gets them forwarded.
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => return fail(Exit::Internal, format!("cannot install signal handlers: {e}")),
    };
    let acquired = acquire(args, redlock, ttl, &mut signals).await;
    timeline.answered(acquired.is_ok());
    let guard = match acquired {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    let (period, grace) = match fit_to_session(args, &guard, (ttl, grace), session_bound) {
        Ok(fitted) => fitted,
        Err(code) => return code,
    };
    if args.verbose {
        say_acquired(args, redlock, &guard);
    }
    let (child, mut reaper, mut guardian) = match start::start(&args.key, &args.command, &guard, grace).await
    {
        Ok(started) => started,
        Err(code) => {
            // The command never ran.
            give_back(guard, timeline).await;
            return code;
        }
    };
    timeline.started();
    reaper.watch(child.id());
    let Ending { status, termination } = Job {
        group: child.id(),
        guard: &guard,
        guardian: &mut guardian,
        reaper: &mut reaper,
        signals: &mut signals,
        grace,
        period,
        verbose: args.verbose,
    }
    .supervise()
    .await;
    timeline.ended();
    // The group is empty: nothing is left for the guardian to kill.
    start::stand_down(&mut guardian, &mut reaper).await;
    // A guardian that killed the group may be reaped only after it.
    let termination = termination.or_else(|| {
        let status = reaper.status(guardian.pid())?;
        (status.code() != Some(i32::from(guardian::status::STOOD_DOWN)))
            .then(|| supervise::guardian_ended(status))
    });
    if let Some(Termination { status: code, reason }) = termination {
        give_back(guard, timeline).await;
        return fail(
            code,
            format!(
                "lock {:?} {reason}; the command was terminated ({status})",
                args.key
            ),
        );
    }
    if !guard.is_held() {
        crate::say!(
            "quorumlock: warning: lock {:?} was lost around the time the command ended",
            args.key
        );
    }
    release(args, guard, ttl, timeline).await;
    timeline.passed_on();
    ExitCode::from(code_of(status))
}

/// The verbose line of an acquisition.
fn say_acquired(args: &Args, redlock: &Redlock, guard: &Guard) {
    crate::say!(
        "quorumlock: acquired {:?} (majority {} of {} nodes), valid for {}",
        args.key,
        redlock.quorum(),
        redlock.nodes(),
        show(guard.remaining())
    );
}

/// Waits for the lock; a signal ends the wait (SIGTSTP stops quorumlock
/// until it is continued). On failure, says why and returns the exit status.
async fn acquire(
    args: &Args,
    redlock: &Redlock,
    ttl: Duration,
    signals: &mut Signals,
) -> Result<Guard, ExitCode> {
    let lock = redlock.lock(args.key.as_str(), ttl);
    tokio::pin!(lock);
    loop {
        tokio::select! {
            result = &mut lock => return result.map_err(|e| lock_failed(args, &e)),
            signo = signals.next() => {
                if signo == libc::SIGTSTP {
                    // Nothing runs yet: stop as the default action would.
                    sys::stop_self();
                    continue;
                }
                crate::say!("quorumlock: interrupted (signal {signo}) while waiting for lock {:?}", args.key);
                return Err(ExitCode::from(exit::signalled(signo)));
            }
        }
    }
}

/// Gives back what is left of the lock (nothing, if it was lost) when the
/// command did not run or was terminated.
async fn give_back(guard: Guard, timeline: &mut Timeline) {
    if guard.is_held() {
        let _ = guard.release().await;
    }
    timeline.released();
}

/// Releases the lock once the command has ended, and says how with `-v`.
async fn release(args: &Args, guard: Guard, ttl: Duration, timeline: &mut Timeline) {
    let released = guard.release().await;
    timeline.released();
    match released {
        Ok(report) if args.verbose => match report.kept_until {
            Some(until) => crate::say!(
                "quorumlock: kept {:?} on {} of {} nodes until its minimum hold passes, in {}",
                args.key,
                report.confirmed,
                report.nodes,
                show(until.saturating_duration_since(Instant::now()))
            ),
            None => crate::say!(
                "quorumlock: released {:?} on {} of {} nodes",
                args.key,
                report.confirmed,
                report.nodes
            ),
        },
        Ok(_) => {}
        Err(e) => crate::say!(
            "quorumlock: warning: release of {:?} failed ({e}); it expires within {}",
            args.key,
            show(ttl)
        ),
    }
}

/// The exit status and message for a lock that could not be taken.
fn lock_failed(args: &Args, error: &Error) -> ExitCode {
    let code = match error {
        Error::Held { .. } => Exit::Busy,
        Error::Config(_) => Exit::Usage,
        Error::Unreachable { .. } | Error::ValidityUsedUp { .. } => Exit::Unreachable,
        _ => Exit::Internal,
    };
    let waited = if args.wait.is_zero() {
        "one attempt".to_owned()
    } else {
        format!("waited {}", show(args.wait))
    };
    match code {
        Exit::Busy => fail(code, format!("lock {:?} is busy ({waited}): {error}", args.key)),
        Exit::Usage => fail(code, error),
        _ => fail(
            code,
            format!("cannot take lock {:?} ({waited}): {error}", args.key),
        ),
    }
}

/// The exit status to pass on: the command's code, or 128 + the signal that
/// killed it (as shells report it).
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(Exit::Internal.code()),
        (None, Some(signo)) => exit::signalled(signo),
        (None, None) => Exit::Internal.code(),
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
