//! `quorumlock unlock KEY --token T | --force`: clears a lock whose holder
//! is gone, from [`quorumlock::Redlock::unlock`] and
//! [`quorumlock::Redlock::force_unlock`].

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use quorumlock::{DeletedValue, Error, NodeError, UnlockOutcome, UnlockReport};

use crate::exit::{self, Exit};
use crate::{Nodes, fail};

const UNLOCK_HELP: &str = "\
Examples:
  quorumlock status archive:nightly        (shows the holder's token)
  quorumlock unlock archive:nightly --token 5f0c9e2a4b7d41e3a8c6f1b2d3e4a5b6
  quorumlock unlock archive:nightly --force --yes

--token T deletes the key on every node where it still holds T (the check
and the delete are one step on each node): a lock that has meanwhile passed
to another holder is left alone. --force deletes whatever the key holds
(another holder's lock, a value without a ttl, other data) and logs on
stderr what it deleted on each node. It asks for confirmation when stdin is
a terminal, and refuses to run without one unless --yes is given.

A holder that is still running is not told: it goes on as if it held the
lock, while someone else may take it at once; its next renewal re-creates the
key, or finds the lock lost if another process took it. Until then both run.
Clear only locks whose holder is known to be gone. The next queued waiter
is woken at once.

There is nothing to delete when no node holds T (--token) or has the key
(--force). A node that does not answer keeps the key until its ttl ends: with
fewer than a majority answering, the lock may stay taken until then.";

/// `unlock --help`'s closing text: examples, the two ways, exit statuses.
fn unlock_help() -> String {
    format!("{UNLOCK_HELP}\n\n{}", exit::table(Some("unlock")))
}

/// Options of `quorumlock unlock`.
#[derive(clap::Args, Debug)]
#[command(after_help = unlock_help())]
pub(crate) struct Args {
    #[command(flatten)]
    nodes: Nodes,
    /// The lock key (resource name).
    #[arg(value_name = "KEY")]
    key: String,
    /// Delete the key only where it holds this token (the holder's, as `status` shows it).
    #[arg(
        long,
        value_name = "TOKEN",
        required_unless_present = "force",
        conflicts_with = "force"
    )]
    token: Option<String>,
    /// Delete whatever the key holds, whoever holds it.
    #[arg(long)]
    force: bool,
    /// With --force: do not ask for confirmation.
    #[arg(long, requires = "force")]
    yes: bool,
}

pub(crate) async fn run(args: Args) -> ExitCode {
    let redlock = match args.nodes.client() {
        Ok(redlock) => redlock,
        Err(message) => return fail(Exit::Usage, message),
    };
    let report = match &args.token {
        Some(token) => redlock.unlock(&args.key, token).await,
        None => {
            if !args.yes {
                if !std::io::stdin().is_terminal() {
                    return fail(
                        Exit::Usage,
                        "--force deletes another holder's lock: refusing without a terminal to confirm \
                         on; add --yes",
                    );
                }
                if !confirm(&args.key) {
                    crate::say!("quorumlock: nothing deleted");
                    return Exit::NothingDeleted.into();
                }
            }
            redlock.force_unlock(&args.key).await
        }
    };
    match report {
        Ok(report) => outcome(&report),
        Err(Error::Config(error)) => fail(Exit::Usage, error.to_string()),
        Err(error) => fail(Exit::Internal, error),
    }
}

/// Asks on stderr and reads the answer from stdin (a terminal).
fn confirm(key: &str) -> bool {
    crate::say::text(format!(
        "quorumlock: delete {key:?} on every node, whoever holds it? [y/N] "
    ));
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes")
}

/// Logs each node's outcome on stderr and returns the exit status.
fn outcome(report: &UnlockReport) -> ExitCode {
    for (i, node) in report.nodes.iter().enumerate() {
        let what = match &node.outcome {
            UnlockOutcome::Deleted(DeletedValue::String(value)) => format!("deleted {value:?}"),
            UnlockOutcome::Deleted(DeletedValue::Other { kind }) => format!("deleted a {kind}"),
            UnlockOutcome::Deleted(_) => "deleted".to_owned(),
            UnlockOutcome::NotHeld => "nothing to delete".to_owned(),
            UnlockOutcome::Failed(kind) => {
                let error = NodeError {
                    node: node.node.clone(),
                    kind: kind.clone(),
                };
                format!("FAILED ({error}): its key stays until its ttl ends")
            }
            _ => "unknown outcome".to_owned(),
        };
        crate::say!(
            "quorumlock: {:?} on node {} ({}): {what}",
            report.resource,
            i + 1,
            node.node
        );
    }
    let (deleted, answered) = (report.deleted(), report.answered());
    crate::say!(
        "quorumlock: {:?}: deleted on {deleted} of {} nodes, {answered} answered, majority {}",
        report.resource,
        report.nodes.len(),
        report.quorum
    );
    let status = if answered < report.quorum {
        Exit::Unreachable
    } else if deleted == 0 {
        Exit::NothingDeleted
    } else {
        Exit::Success
    };
    status.into()
}
