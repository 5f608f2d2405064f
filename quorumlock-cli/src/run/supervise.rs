//! Watching over the command's process group while the lock is held:
//! forwarding signals, terminating on loss, job control, and waiting until
//! no process of the group is left.
//!
//! The supervisor's state is three small state machines, each moving only
//! forward: whether quorumlock still vouches for the lock ([`Verdict`]), how
//! far ending the group has gone ([`Stage`]), and whether the command, the
//! group's leader, has exited ([`Leader`]). Each wake-up is an [`Event`],
//! and [`Job::handle`] says what each one does to them.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use libc::c_int;
use quorumlock::Guard;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Instant, sleep, sleep_until};

use super::guardian::{self, Guardian};
use super::reap::Reaper;
use super::sys;
use crate::duration::show;
use crate::exit::Exit;

/// How often to look whether the command's group is empty once its leader
/// has exited: the other members need not be our children, so their exits
/// send us no SIGCHLD.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// The guardian's deadline is refreshed this many times per validity period
/// (the ttl, or the share of a ZooKeeper session when that is shorter).
/// Renewals come every third of it, halfway at the latest, and leave at
/// least half of it before the previous deadline, so a refresh within a
/// tenth always reaches the guardian in time.
const DEADLINE_REFRESHES_PER_PERIOD: u32 = 10;

/// The shortest refresh period, so that a tiny validity period cannot make
/// the loop spin.
const MIN_DEADLINE_REFRESH: Duration = Duration::from_millis(1);

/// The signals quorumlock handles itself.
pub(crate) struct Signals {
    streams: Vec<(c_int, Signal)>,
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
    pub(crate) async fn next(&mut self) -> c_int {
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

/// Why quorumlock ended the command's group on its own.
#[derive(Debug)]
pub(crate) struct Termination {
    /// The status to exit with instead of the command's.
    pub(crate) status: Exit,
    /// What happened to the lock, to follow "lock KEY" in the message.
    pub(crate) reason: String,
}

/// How the command's group ended.
pub(crate) struct Ending {
    /// The exit status of the command (the group's leader).
    pub(crate) status: ExitStatus,
    /// Set when quorumlock terminated the group for its own reasons.
    pub(crate) termination: Option<Termination>,
}

/// What the supervisor watches over.
pub(crate) struct Job<'a> {
    pub(crate) group: u32,
    pub(crate) guard: &'a Guard,
    pub(crate) guardian: &'a mut Guardian,
    pub(crate) reaper: &'a mut Reaper,
    pub(crate) signals: &'a mut Signals,
    pub(crate) grace: Duration,
    /// The validity a renewal gives: the ttl, or less when a ZooKeeper
    /// session grants less; the guardian's deadline is refreshed at its pace.
    pub(crate) period: Duration,
    pub(crate) verbose: bool,
}

/// Whether quorumlock still vouches for the lock.
enum Verdict {
    /// It does: the loss, the validity and the guardian are watched.
    Vouching,
    /// It ended the group on its own, for this reason, and watches no more.
    Terminated(Termination),
}

/// How far ending the command's group has gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing has asked the group to end.
    Running,
    /// The group was sent SIGTERM (or a forwarded signal); SIGKILL follows
    /// at `kill_at` unless the group is gone by then.
    Ending { kill_at: Instant },
    /// SIGKILL was sent. It is sent again on every look at a group whose
    /// leader is gone, for a process forked while it was being delivered.
    Killing,
}

/// Whether the command, the group's leader, has been seen to exit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leader {
    /// It runs; its exit comes with a SIGCHLD.
    Running,
    /// It has exited and others of its group are left: they get SIGTERM
    /// once, and the group is polled until it is empty.
    Exited,
}

/// What woke the supervisor.
enum Event {
    /// A child exited (and was reaped).
    Reaped,
    /// quorumlock received this signal.
    Signal(c_int),
    /// The lock was lost.
    LockLost,
    /// Only the grace period of validity was left (unless renewal moved it).
    ValidityLow,
    /// SIGKILL is due.
    KillDue,
    /// The guardian's deadline is due for a refresh.
    RefreshDue,
    /// Time to look at a group whose leader is gone.
    Poll,
}

/// The supervisor's state (see the module's doc).
struct State {
    verdict: Verdict,
    stage: Stage,
    leader: Leader,
    next_refresh: Instant,
}

impl Verdict {
    fn vouching(&self) -> bool {
        matches!(self, Verdict::Vouching)
    }

    /// Gives up vouching for `termination`'s reason; whether this was the
    /// first reason (the one reported).
    fn give_up(&mut self, termination: Termination) -> bool {
        if !self.vouching() {
            return false;
        }
        *self = Verdict::Terminated(termination);
        true
    }

    fn termination(self) -> Option<Termination> {
        match self {
            Verdict::Vouching => None,
            Verdict::Terminated(termination) => Some(termination),
        }
    }
}

impl Stage {
    /// Makes SIGKILL due at `at`, unless it is due earlier or was sent.
    fn kill_by(&mut self, at: Instant) {
        *self = match *self {
            Stage::Running => Stage::Ending { kill_at: at },
            Stage::Ending { kill_at } => Stage::Ending {
                kill_at: kill_at.min(at),
            },
            Stage::Killing => Stage::Killing,
        };
    }

    /// When SIGKILL is due, while it is.
    fn kill_at(self) -> Option<Instant> {
        match self {
            Stage::Ending { kill_at } => Some(kill_at),
            Stage::Running | Stage::Killing => None,
        }
    }
}

impl Job<'_> {
    /// Runs until the command has exited and no process of its group is
    /// left, forwarding signals and terminating the group when the lock is
    /// lost or about to be, or when the guardian fails.
    pub(crate) async fn supervise(&mut self) -> Ending {
        let refresh = (self.period / DEADLINE_REFRESHES_PER_PERIOD).max(MIN_DEADLINE_REFRESH);
        let mut state = State {
            verdict: Verdict::Vouching,
            stage: Stage::Running,
            leader: Leader::Running,
            next_refresh: Instant::now() + refresh,
        };
        self.reaper.reap();
        loop {
            if let Some(status) = self.look(&mut state) {
                let termination = state.verdict.termination();
                return Ending { status, termination };
            }
            let event = self.next_event(&state).await;
            self.handle(event, &mut state, refresh);
        }
    }

    /// Looks at the guardian and at the group: the command's exit status
    /// once no process of its group is left.
    fn look(&mut self, state: &mut State) -> Option<ExitStatus> {
        if state.verdict.vouching()
            && let Some(status) = self.guardian_exit()
        {
            self.give_up(state, guardian_ended(status));
        }
        let status = self.reaper.status(self.group)?;
        if !sys::group_alive(self.group) {
            return Some(status);
        }
        if state.stage == Stage::Killing {
            sys::signal_group(self.group, libc::SIGKILL);
        }
        if state.leader == Leader::Running {
            state.leader = Leader::Exited;
            if self.verbose {
                crate::say!(
                    "quorumlock: the command exited and left processes in its group; \
                     terminating them before the release"
                );
            }
            self.end_group(&mut state.stage);
        }
        None
    }

    /// Waits for whatever comes first of what `state` waits for.
    async fn next_event(&mut self, state: &State) -> Event {
        let now = Instant::now();
        let stop_at = self.guard.valid_until().checked_sub(self.grace).unwrap_or(now);
        let vouching = state.verdict.vouching();
        let kill_at = state.stage.kill_at();
        tokio::select! {
            biased;
            () = self.reaper.changed() => Event::Reaped,
            signo = self.signals.next() => Event::Signal(signo),
            () = self.guard.lost(), if vouching => Event::LockLost,
            () = sleep_until(stop_at), if vouching => Event::ValidityLow,
            () = sleep_until(kill_at.unwrap_or(now)), if kill_at.is_some() => Event::KillDue,
            () = sleep_until(state.next_refresh) => Event::RefreshDue,
            () = sleep(GROUP_POLL), if state.leader == Leader::Exited => Event::Poll,
        }
    }

    /// The transitions: what each event does to the group and to `state`.
    fn handle(&mut self, event: Event, state: &mut State, refresh: Duration) {
        match event {
            Event::Reaped | Event::Poll => {}
            Event::Signal(libc::SIGTSTP) => {
                if let Some(reason) = self.stop_and_resume() {
                    // The group got SIGKILL already: no SIGTERM, no grace.
                    state.verdict.give_up(lost(reason));
                    state.stage = Stage::Killing;
                }
            }
            Event::Signal(signo) => {
                sys::signal_group(self.group, signo);
                // A command that ignores the signal must not keep the lock forever.
                state.stage.kill_by(Instant::now() + self.grace);
            }
            Event::LockLost => self.give_up(state, lost("was lost".to_owned())),
            Event::ValidityLow => {
                // Renewal may have moved the validity meanwhile.
                let stop_at = self.guard.valid_until().checked_sub(self.grace);
                if stop_at.is_none_or(|at| at <= Instant::now()) {
                    let reason = format!(
                        "was not confirmed by a majority of nodes and had {} of validity left",
                        show(self.grace)
                    );
                    self.give_up(state, lost(reason));
                }
            }
            Event::KillDue => {
                sys::signal_group(self.group, libc::SIGKILL);
                state.stage = Stage::Killing;
            }
            Event::RefreshDue => {
                state.next_refresh = Instant::now() + refresh;
                if let Err(e) = self.guardian.update(self.guard.valid_until()) {
                    let reason = format!("cannot reach the guardian ({e})");
                    self.give_up(
                        state,
                        Termination {
                            status: Exit::Internal,
                            reason,
                        },
                    );
                }
            }
        }
    }

    /// quorumlock can no longer vouch for the lock: the group is ended. Only
    /// the first reason counts; later ones change nothing.
    fn give_up(&self, state: &mut State, termination: Termination) {
        if state.verdict.give_up(termination) {
            self.end_group(&mut state.stage);
        }
    }

    /// Sends SIGTERM to the group and has SIGKILL follow after the grace
    /// period (or earlier, if it already was due earlier).
    fn end_group(&self, stage: &mut Stage) {
        sys::signal_group(self.group, libc::SIGTERM);
        stage.kill_by(Instant::now() + self.grace);
    }

    /// The guardian's exit status, if it exited on its own (it was not told
    /// to stand down).
    fn guardian_exit(&self) -> Option<ExitStatus> {
        if self.guardian.stood_down() {
            return None;
        }
        self.reaper.status(self.guardian.pid())
    }

    /// Ctrl-Z: stops the command's group, then quorumlock itself, so that the
    /// shell's job control works. Once continued, the group continues only if
    /// the lock is still held with more than the grace period left;
    /// otherwise it is killed, and the reason returned.
    fn stop_and_resume(&mut self) -> Option<String> {
        sys::signal_group(self.group, libc::SIGSTOP);
        sys::stop_self();
        if self.guard.is_held() && self.guard.remaining() > self.grace {
            sys::signal_group(self.group, libc::SIGCONT);
            return None;
        }
        // SIGKILL first: continued before it, the command would run again
        // on a lock whose validity may have passed.
        sys::signal_group(self.group, libc::SIGKILL);
        sys::signal_group(self.group, libc::SIGCONT);
        Some(format!(
            "had less than {} of validity left when quorumlock was continued",
            show(self.grace)
        ))
    }
}

/// The lock was lost (or is about to be), for `reason`.
fn lost(reason: String) -> Termination {
    Termination {
        status: Exit::Lost,
        reason,
    }
}

/// Why the command was ended when the guardian exited on its own.
pub(crate) fn guardian_ended(status: ExitStatus) -> Termination {
    match status.code().and_then(|c| u8::try_from(c).ok()) {
        Some(guardian::status::DEADLINE) => lost(
            "passed its validity deadline without renewal (quorumlock was stopped or stalled)".to_owned(),
        ),
        _ => Termination {
            status: Exit::Internal,
            reason: format!("is no longer guarded: the guardian process ended ({status})"),
        },
    }
}
