//! The exit statuses of quorumlock itself, each with the reason for its
//! number. `run` otherwise exits with the command's own status, or 128 + N
//! when the command died of signal N ([`signalled`]), as shells report it.
//!
//! The help's lists ([`table`]) are made from [`Exit::ALL`], and a test holds
//! the table in docs/operations.md ("Exit statuses") to it.

use std::fmt::Write as _;
use std::process::ExitCode;

/// An exit status of quorumlock's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It did what was asked: `check` found every node usable, `status`
    /// every key free, `unlock` deleted the key.
    Success,
    /// `check`: at least one node is unusable (or, with `--strict`, has a
    /// warning). 1, the usual "no" of a test command.
    CheckFailed,
    /// `status`: some key is held, and none indeterminate. 1, so that a
    /// script's `if quorumlock status KEY` reads "if the key is free".
    Held,
    /// `unlock`: nothing was deleted (no node held the token, or the key),
    /// or the confirmation was declined. 1, the usual "no".
    NothingDeleted,
    /// `demo`: no lock was taken, two holders of a resource overlapped, or
    /// the demo was interrupted. 1, the usual failure.
    DemoFailed,
    /// Bad usage: an unknown option, a bad duration, no nodes, a bad node
    /// URL. 2, the status of clap's own parse errors and of most tools.
    Usage,
    /// `status`: some key is neither held nor free by a majority. 3: the
    /// next number after held (1) and bad usage (2), and the worst verdict.
    Indeterminate,
    /// Too many nodes failed or were too slow to reach a majority:
    /// sysexits' EX_UNAVAILABLE ("service unavailable").
    Unreachable,
    /// Another owner held the lock for the whole `--wait`: sysexits'
    /// EX_TEMPFAIL ("temporary failure, try again").
    Busy,
    /// The lock was lost (or about to be) while the command ran, or its
    /// validity passed while quorumlock was stopped, and the command was
    /// terminated; or the validity ran out between taking the lock and the
    /// command's start, and the command did not run. Outside the sysexits
    /// meanings and the shell's 126 and up, so that it reads as nothing else.
    Lost,
    /// quorumlock itself failed (not the command, not the nodes), e.g. its
    /// guardian process died; a running command was terminated. 125, as
    /// `env`, `timeout` and other commands that run a command use it for
    /// their own failures, below the shell's 126 and 127.
    Internal,
    /// The command exists but could not be executed (as in the shell).
    CannotExecute,
    /// The command was not found (as in the shell).
    NotFound,
}

/// Added to a signal's number for the status of a process it killed, as
/// shells report it.
const SIGNAL_BASE: i32 = 128;

impl Exit {
    /// Every status, in the order of their numbers (and of the tables).
    pub(crate) const ALL: [Exit; 13] = [
        Exit::Success,
        Exit::CheckFailed,
        Exit::Held,
        Exit::NothingDeleted,
        Exit::DemoFailed,
        Exit::Usage,
        Exit::Indeterminate,
        Exit::Unreachable,
        Exit::Busy,
        Exit::Lost,
        Exit::Internal,
        Exit::CannotExecute,
        Exit::NotFound,
    ];

    /// The number the process exits with.
    pub(crate) const fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::CheckFailed | Exit::Held | Exit::NothingDeleted | Exit::DemoFailed => 1,
            Exit::Usage => 2,
            Exit::Indeterminate => 3,
            Exit::Unreachable => 69,
            Exit::Busy => 75,
            Exit::Lost => 79,
            Exit::Internal => 125,
            Exit::CannotExecute => 126,
            Exit::NotFound => 127,
        }
    }

    /// The commands that exit with it; empty for any command.
    pub(crate) const fn commands(self) -> &'static [&'static str] {
        match self {
            Exit::Success | Exit::Usage | Exit::Internal => &[],
            Exit::CheckFailed => &["check"],
            Exit::Held | Exit::Indeterminate => &["status"],
            Exit::NothingDeleted => &["unlock"],
            Exit::DemoFailed => &["demo"],
            Exit::Unreachable => &["run", "unlock", "demo"],
            Exit::Busy | Exit::Lost | Exit::CannotExecute | Exit::NotFound => &["run"],
        }
    }

    /// What it means, in a few words (the help's lists).
    pub(crate) const fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::CheckFailed => "a node is unusable (with --strict, also on a warning)",
            Exit::Held => "some key is held (and none indeterminate)",
            Exit::NothingDeleted => "nothing to delete, or the confirmation was declined",
            Exit::DemoFailed => "no lock taken, holders overlapped, or interrupted",
            Exit::Usage => "bad usage",
            Exit::Indeterminate => "some key is indeterminate",
            Exit::Unreachable => "nodes unreachable: fewer than a majority answered",
            Exit::Busy => "lock busy for the whole --wait",
            Exit::Lost => "lock lost (the command was terminated, or did not start)",
            Exit::Internal => "quorumlock itself failed (run: the command was terminated)",
            Exit::CannotExecute => "the command could not be executed",
            Exit::NotFound => "the command was not found",
        }
    }

    /// Whether `command` can exit with it.
    pub(crate) fn applies_to(self, command: &str) -> bool {
        self.commands().is_empty() || self.commands().contains(&command)
    }

    /// The commands as the tables show them: "any", or their names.
    fn scope(self) -> String {
        if self.commands().is_empty() {
            "any".to_owned()
        } else {
            self.commands().join(", ")
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(status: Exit) -> ExitCode {
        ExitCode::from(status.code())
    }
}

/// The status of a process that died of signal `signo`: 128 + N, as shells
/// report it ([`Exit::Internal`] for a number that does not fit).
pub(crate) fn signalled(signo: i32) -> u8 {
    u8::try_from(SIGNAL_BASE + signo).unwrap_or(Exit::Internal.code())
}

/// The exit statuses as the help lists them: of every command (`None`,
/// with the commands named), or of one.
pub(crate) fn table(command: Option<&str>) -> String {
    let mut out = String::from(if command.is_some() {
        "Exit status:\n"
    } else {
        "Exit statuses:\n"
    });
    for status in Exit::ALL {
        match command {
            None => {
                let _ = writeln!(
                    out,
                    "  {:>3}  {}: {}",
                    status.code(),
                    status.scope(),
                    status.meaning()
                );
            }
            Some(command) if status.applies_to(command) => {
                let _ = writeln!(out, "  {:>3}  {}", status.code(), status.meaning());
            }
            Some(_) => {}
        }
    }
    if command.is_none_or(|command| command == "run") {
        out.push_str(
            "  `run` otherwise exits with the command's own status (128+N when it died of signal N).\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of docs/operations.md: (status, commands) of each row whose
    /// status is a number, backticks dropped.
    fn documented() -> Vec<(u8, String)> {
        let docs = include_str!("../../docs/operations.md");
        let table = docs
            .split_once("| status | commands | meaning |")
            .expect("docs/operations.md has the table of exit statuses")
            .1;
        table
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let code = cells.get(1)?.parse().ok()?;
                Some((code, cells.get(2)?.replace('`', "")))
            })
            .collect()
    }

    #[test]
    fn the_documented_table_is_this_one() {
        let ours: Vec<(u8, String)> = Exit::ALL.iter().map(|s| (s.code(), s.scope())).collect();
        assert_eq!(documented(), ours);
    }

    #[test]
    fn statuses_are_listed_in_order_and_each_once() {
        assert!(Exit::ALL.is_sorted_by_key(|s| s.code()));
        for (i, status) in Exit::ALL.iter().enumerate() {
            assert!(!Exit::ALL[..i].contains(status), "{status:?} twice");
        }
    }

    #[test]
    fn a_command_lists_only_its_own_statuses() {
        let status = table(Some("status"));
        for code in ["0", "1", "2", "3", "125"] {
            assert!(
                status.lines().any(|l| l.trim_start().starts_with(code)),
                "{code}: {status}"
            );
        }
        assert!(
            !status.contains("69") && !status.contains("command's own"),
            "{status}"
        );
        assert!(table(Some("run")).contains("128+N"));
    }

    #[test]
    fn signal_deaths_are_128_plus_the_signal() {
        assert_eq!(signalled(libc::SIGTERM), 143);
        assert_eq!(signalled(libc::SIGKILL), 137);
        assert_eq!(signalled(200), Exit::Internal.code());
    }
}
