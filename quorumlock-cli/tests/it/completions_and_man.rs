//! `quorumlock completions SHELL` and `quorumlock man`: made from the same
//! definition as the help, they offer every command the help lists and
//! document every option of `run`; the man page renders with `man -l`
//! where man is installed.

use std::process::Command;

use quorumlock_testkit::cli::{Binary, scratch, text};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// The standard output of `quorumlock ARGS`, which must succeed.
fn stdout_of(args: &[&str]) -> String {
    let out = QUORUMLOCK
        .command(&[])
        .args(args)
        .output()
        .expect("run quorumlock");
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The first word of each line of the help's `heading` section.
fn listed(help: &str, heading: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| *line != heading)
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The commands `quorumlock --help` lists (`help` included).
fn commands() -> Vec<String> {
    let commands = listed(&stdout_of(&["--help"]), "Commands:");
    assert!(commands.len() >= 6, "the help lists the commands: {commands:?}");
    commands
}

/// The long options `quorumlock run --help` lists.
fn options_of_run() -> Vec<String> {
    let help = stdout_of(&["run", "--help"]);
    let options: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Options:")
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().find(|word| word.starts_with("--")))
        .map(|option| option.trim_end_matches(',').to_owned())
        .collect();
    assert!(options.len() >= 10, "the help lists run's options: {options:?}");
    options
}

#[test]
fn bash_zsh_and_fish_completions_offer_every_command() {
    let commands = commands();
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        for command in &commands {
            assert!(
                script.contains(command.as_str()),
                "{shell}: {command} is not completed:\n{script}"
            );
        }
        assert!(
            !script.contains("__guardian"),
            "{shell}: the guardian is not a command users type"
        );
    }
    let out = QUORUMLOCK
        .command(&[])
        .args(["completions", "tcsh"])
        .output()
        .expect("run quorumlock");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn the_man_page_names_every_command_and_every_option_of_run() {
    let page = stdout_of(&["man"]);
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "{page}");
    assert!(page.contains(".TH quorumlock 1"), "{page}");
    for command in commands().iter().filter(|c| *c != "help") {
        let heading = format!(".SH \"QUORUMLOCK {}\"", command.to_uppercase());
        assert!(page.contains(&heading), "no section {heading}:\n{page}");
    }
    let run = page
        .split_once(".SH \"QUORUMLOCK RUN\"")
        .and_then(|(_, rest)| rest.split(".SH ").next())
        .expect("the section of run");
    for option in options_of_run() {
        // roff writes a hyphen as `\-`.
        let written = option.replace('-', "\\-");
        assert!(run.contains(&written), "run's section lacks {option}:\n{run}");
    }
}

#[test]
fn the_man_page_renders_with_man() {
    let found = Command::new("sh")
        .args(["-c", "command -v man"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        eprintln!("skipping the rendering: `man` is not installed (apt-get install man-db)");
        return;
    }
    let dir = scratch("man");
    let file = dir.join("quorumlock.1");
    std::fs::write(&file, stdout_of(&["man"])).expect("write the page");
    let out = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("run man");
    let rendered = text(&out.stdout);
    assert!(out.status.success(), "man -l: {}\n{rendered}", text(&out.stderr));
    for wanted in ["QUORUMLOCK RUN", "--min-hold", "Exit statuses:"] {
        assert!(rendered.contains(wanted), "{wanted}:\n{rendered}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
