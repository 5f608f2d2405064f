//! `quorumlock completions SHELL`: the shell's completion script, made by
//! clap_complete from the command-line definition, so that it offers exactly
//! what this build of quorumlock accepts.

use clap_complete::Shell;

const COMPLETIONS_HELP: &str = "\
Install the script where the shell looks for completions:
  quorumlock completions bash > ~/.local/share/bash-completion/completions/quorumlock
  quorumlock completions zsh > ~/.zfunc/_quorumlock
      (with `fpath+=(~/.zfunc)` before `compinit` in ~/.zshrc)
  quorumlock completions fish > ~/.config/fish/completions/quorumlock.fish
  quorumlock completions elvish >> ~/.config/elvish/rc.elv
  quorumlock completions powershell >> $PROFILE
Then start a new shell.";

/// Options of `quorumlock completions`.
#[derive(clap::Args, Debug)]
#[command(after_help = COMPLETIONS_HELP)]
pub(crate) struct Args {
    /// The shell to complete for.
    #[arg(value_name = "SHELL")]
    pub(crate) shell: Shell,
}

/// The completion script of `shell` for `cli`, the whole command line.
pub(crate) fn script(shell: Shell, mut cli: clap::Command) -> Vec<u8> {
    let name = cli.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, name, &mut script);
    script
}
