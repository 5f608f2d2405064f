//! The `quorumlock` command-line tool.

mod demo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Distributed locks over N independent Redis nodes (Redlock).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start 5 local redis-server nodes, run workers that contend for a few
    /// resources while a node is killed and restarted, and print what happened.
    Demo(demo::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match cli.command {
        Command::Demo(args) => runtime.block_on(demo::run(args)),
    }
}
