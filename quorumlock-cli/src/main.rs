//! The `quorumlock` command-line tool: `run` (a flock(1) across machines),
//! `check` (are the nodes fit for Redlock?), `status` and `unlock` (who
//! holds a lock, and clearing it) and `demo`.

// Unsafe only in small reviewed libc calls, each allowed where it is made.
#![deny(unsafe_code)]

mod check;
#[cfg(feature = "demo")]
mod demo;
mod duration;
mod guardian;
mod nodes;
mod reap;
mod run;
mod say;
mod start;
mod status;
mod supervise;
mod tls;
mod unlock;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use nodes::Nodes;

/// Exit statuses of the tool itself (`run` otherwise passes the command's through).
pub(crate) mod exit {
    /// `check`: at least one node is unusable (or, with `--strict`, has a warning).
    pub(crate) const CHECK_FAILED: u8 = 1;
    /// `status`: some key is held (and none indeterminate).
    pub(crate) const HELD: u8 = 1;
    /// `status`: some key is neither held nor free by a majority.
    pub(crate) const INDETERMINATE: u8 = 3;
    /// `unlock`: nothing was deleted (no node held the token or the key), or
    /// the confirmation was declined.
    pub(crate) const NOTHING_DELETED: u8 = 1;
    /// Bad usage: unknown option, bad duration, no nodes, bad node URL.
    pub(crate) const USAGE: u8 = 2;
    /// Too many nodes failed or were too slow to reach a majority (sysexits' EX_UNAVAILABLE).
    pub(crate) const UNREACHABLE: u8 = 69;
    /// Another owner held the lock for the whole `--wait` (sysexits' EX_TEMPFAIL: try later).
    pub(crate) const BUSY: u8 = 75;
    /// The lock was lost (or about to be) while the command ran, or its validity passed
    /// while quorumlock was stopped; the command was terminated. Also: the validity ran
    /// out between taking the lock and the command's start; the command did not run.
    /// Outside the sysexits meanings and the shell's 126+ range on purpose.
    pub(crate) const LOST: u8 = 79;
    /// quorumlock itself failed (not the command, not the nodes), e.g. its guardian
    /// process died; a running command was terminated.
    pub(crate) const INTERNAL: u8 = 125;
    /// The command exists but could not be executed (as in the shell).
    pub(crate) const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found (as in the shell).
    pub(crate) const NOT_FOUND: u8 = 127;
}

const AFTER_HELP: &str = "\
Nodes come from --nodes, --nodes-file or QUORUMLOCK_NODES (comma separated
redis:// or rediss:// URLs). `ps` shows --nodes to every user of the machine:
give URLs with a password through QUORUMLOCK_NODES or --nodes-file (chmod 600).
No URL quorumlock prints shows a password, and the command run by `run` does
not inherit QUORUMLOCK_NODES. QUORUMLOCK_NODE_TIMEOUT sets --node-timeout and
QUORUMLOCK_WAIT sets `run --wait`: the names a service reads with
quorumlock::Redlock::from_env.
Durations: 30s, 500ms, 2m, 1h, 1m30s; a plain number is seconds.

Examples:
  quorumlock demo            (built with --features demo)
  quorumlock check --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  export QUORUMLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  quorumlock run --key archive:nightly --wait 2s -- /usr/local/bin/archive --older-than 30d
  quorumlock run --key sync:hourly --wait 30s --min-hold 10m -- ./sync   (once per period)
  quorumlock run --key ledger --fenced -- ./post.sh   (gets $QUORUMLOCK_FENCE_TOKEN)
  quorumlock status archive:nightly          (who holds it, for how long, waiters)
  quorumlock unlock archive:nightly --token 5f0c9e2a4b7d41e3a8c6f1b2d3e4a5b6
  quorumlock unlock archive:nightly --force  (asks first; --yes in scripts)

Exit statuses of `run`: the command's own (128+N when it died of signal N);
  2 bad usage, 69 nodes unreachable, 75 lock busy, 79 lock lost (command
  terminated, or not started), 125 quorumlock failed (command terminated), 126 command not
  executable, 127 command not found.
  `check`: 0 usable, 1 a node is unusable, 2 bad usage.
  `status`: 0 every key free, 1 some key held, 3 some key indeterminate, 2 bad usage.
  `unlock`: 0 deleted, 1 nothing to delete (or declined), 2 bad usage,
  69 fewer than a majority of nodes answered.";

/// Distributed locks over N independent Redis nodes (Redlock).
#[derive(Parser, Debug)]
#[command(version, about, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding a lock, like flock(1) across machines.
    Run(run::Args),
    /// Check each node: latency, version, role, persistence, clock offset.
    Check(check::Args),
    /// Show who holds each lock, for how long, and how many wait (operators).
    Status(status::Args),
    /// Clear a lock: by its holder's token, or --force whoever holds it (operators).
    Unlock(unlock::Args),
    /// Contending workers over local (or given) nodes while a node crashes.
    #[cfg(feature = "demo")]
    Demo(demo::Args),
    /// Internal: the guardian process of `run` (reads its pipe on stdin).
    #[command(name = guardian::SUBCOMMAND, hide = true)]
    Guardian,
}

/// Prints an error of the tool itself (not of the command) on stderr.
pub(crate) fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    crate::say!("quorumlock: {message}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Guardian = cli.command {
        // A plain synchronous loop: no runtime, no threads.
        return guardian::main();
    }
    let code = dispatch(cli);
    // What quorumlock said last (often why it failed) goes out before the
    // exit status, unless stderr is not being read.
    say::flush(say::FLUSH_LIMIT);
    code
}

fn dispatch(cli: Cli) -> ExitCode {
    tls::install_provider();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return fail(exit::INTERNAL, format!("cannot start the runtime: {e}")),
    };
    match cli.command {
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Check(args) => runtime.block_on(check::run(args)),
        Command::Status(args) => runtime.block_on(status::run(args)),
        Command::Unlock(args) => runtime.block_on(unlock::run(args)),
        #[cfg(feature = "demo")]
        Command::Demo(args) => runtime.block_on(demo::run(args)),
        Command::Guardian => guardian::main(),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn the_node_timeout_default_is_the_library_default() {
        assert_eq!(
            super::duration::parse("100ms"),
            Ok(quorumlock::DEFAULT_NODE_TIMEOUT)
        );
    }
}
