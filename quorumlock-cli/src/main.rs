//! The `quorumlock` command-line tool: `run` (a flock(1) across machines),
//! `check` (are the nodes fit for Redlock?), `status` and `unlock` (who
//! holds a lock, and clearing it), `demo`, and the shell completions and
//! man page made from its definition.

// Unsafe only in `sys`'s wrappers of libc calls, and where the command's
// process is given its step between fork and exec (`run::start::spawn`).
#![deny(unsafe_code)]

mod check;
mod completions;
#[cfg(feature = "demo")]
mod demo;
mod duration;
mod exit;
mod man;
mod nodes;
mod run;
mod say;
mod status;
mod table;
mod tls;
mod unlock;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use exit::Exit;
pub(crate) use nodes::Nodes;

const AFTER_HELP: &str = "\
Nodes come from --nodes, --nodes-file or QUORUMLOCK_NODES (comma separated
redis:// or rediss:// URLs, or one etcd cluster as one URL with its members
comma separated, etcd://h1:2379,h2:2379,h3:2379[/prefix], in a build with the
`etcd` feature, or one ZooKeeper ensemble as one URL with its servers comma
separated, zk://h1:2181,h2:2181,h3:2181[/chroot][?session_timeout=10s], in a
build with the `zookeeper` feature). `ps` shows --nodes to every user of the machine:
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
  quorumlock unlock archive:nightly --force  (asks first; --yes in scripts)";

/// The top-level help's closing text: the nodes, examples, exit statuses.
fn after_help() -> String {
    format!("{AFTER_HELP}\n\n{}", exit::table(None))
}

/// Distributed locks over N independent Redis nodes (Redlock).
#[derive(Parser, Debug)]
#[command(name = "quorumlock", version, about, after_help = after_help())]
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
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell).
    Completions(completions::Args),
    /// Print the manual page, quorumlock(1), in roff (`quorumlock man | man -l -`).
    Man,
}

/// Prints an error of the tool itself (not of the command) on stderr, and
/// returns the status to exit with.
pub(crate) fn fail(status: Exit, message: impl std::fmt::Display) -> ExitCode {
    crate::say!("quorumlock: {message}");
    status.into()
}

fn main() -> ExitCode {
    // The guardian of `run` is this binary run with one argument of its own,
    // not a command of the definition: the help, the completions and the man
    // page show only what users type. It is a plain synchronous loop: no
    // runtime, no threads.
    if run::guardian::is_invoked() {
        return run::guardian::main();
    }
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Completions(args) => print(&completions::script(args.shell, Cli::command())),
        Command::Man => match man::page(Cli::command()) {
            Ok(page) => print(&page),
            Err(e) => fail(Exit::Internal, format!("cannot make the man page: {e}")),
        },
        Command::Run(args) => on_runtime(run::run(args)),
        Command::Check(args) => on_runtime(check::run(args)),
        Command::Status(args) => on_runtime(status::run(args)),
        Command::Unlock(args) => on_runtime(unlock::run(args)),
        #[cfg(feature = "demo")]
        Command::Demo(args) => on_runtime(demo::run(args)),
    };
    // What quorumlock said last (often why it failed) goes out before the
    // exit status, unless stderr is not being read.
    say::flush(say::FLUSH_LIMIT);
    code
}

/// Runs a command that talks to the nodes, on a runtime of one thread.
fn on_runtime(command: impl Future<Output = ExitCode>) -> ExitCode {
    tls::install_provider();
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(command),
        Err(e) => fail(Exit::Internal, format!("cannot start the runtime: {e}")),
    }
}

/// Writes text made here (a completion script, the man page) to stdout. A
/// reader that stops early (`| head`) has what it wanted: not a failure.
fn print(text: &[u8]) -> ExitCode {
    let mut stdout = io::stdout().lock();
    match stdout.write_all(text).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            fail(Exit::Internal, format!("cannot write to stdout: {e}"))
        }
        _ => Exit::Success.into(),
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
