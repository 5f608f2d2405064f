//! `quorumlock man`: the manual page, quorumlock(1), in roff, made by
//! clap_mangen from the command-line definition. One page documents every
//! command: the top level's sections, then a section per command with its
//! synopsis, description, options and closing text (examples, exit statuses).

use std::io::{self, Write};

use clap_mangen::Man;
use clap_mangen::roff::{Roff, roman};

/// The page, for `cli`, the whole command line.
pub(crate) fn page(cli: clap::Command) -> io::Result<Vec<u8>> {
    // `help` is a command for the terminal, not for the page.
    let name = cli.get_name().to_owned();
    let mut cli = cli.disable_help_subcommand(true).bin_name(name);
    cli.build();
    let mut page = Vec::new();
    let top = Man::new(cli.clone());
    top.render_title(&mut page)?;
    top.render_name_section(&mut page)?;
    top.render_synopsis_section(&mut page)?;
    top.render_description_section(&mut page)?;
    top.render_options_section(&mut page)?;
    for command in cli.get_subcommands().filter(|c| !c.is_hide_set()) {
        command_section(command, &mut page)?;
    }
    closing_text(&cli, "NOTES", "SH", &mut page)?;
    top.render_version_section(&mut page)?;
    Ok(page)
}

/// A command's section: clap_mangen's synopsis, description and options of
/// it, as subsections, then its closing text.
fn command_section(command: &clap::Command, page: &mut Vec<u8>) -> io::Result<()> {
    // "QUORUMLOCK RUN": the name the command is called by.
    let heading = command
        .get_bin_name()
        .unwrap_or(command.get_name())
        .to_uppercase();
    let mut roff = Roff::new();
    roff.control("SH", [heading.as_str()]);
    roff.to_writer(page)?;
    let man = Man::new(command.clone());
    let mut sections = Vec::new();
    man.render_synopsis_section(&mut sections)?;
    man.render_description_section(&mut sections)?;
    man.render_options_section(&mut sections)?;
    page.write_all(&as_subsections(&sections))?;
    closing_text(command, "Notes", "SS", page)
}

/// `roff` with its section headings (`.SH`) made subsection headings (`.SS`).
/// Only headings start a line with `.SH`: roff escapes a text line that
/// starts with a dot.
fn as_subsections(roff: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(roff);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.strip_prefix(".SH ") {
            Some(title) => {
                out.push_str(".SS ");
                out.push_str(&capitalized(title));
            }
            None => out.push_str(line),
        }
    }
    out.into_bytes()
}

/// "OPTIONS" as "Options": subsection titles are not in capitals.
fn capitalized(title: &str) -> String {
    let lower = title.to_lowercase();
    let mut chars = lower.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The command's text after its options (`after_help`), under `heading`
/// (a `.SH` or `.SS` one), line for line: it is laid out for a terminal, and
/// filled into paragraphs its examples and tables would run together.
fn closing_text(command: &clap::Command, heading: &str, level: &str, page: &mut Vec<u8>) -> io::Result<()> {
    let Some(text) = command.get_after_long_help().or_else(|| command.get_after_help()) else {
        return Ok(());
    };
    let mut roff = Roff::new();
    roff.control(level, [heading]);
    roff.control("nf", []);
    for line in text.to_string().lines() {
        roff.text([roman(line)]);
    }
    roff.control("fi", []);
    roff.to_writer(page)
}
