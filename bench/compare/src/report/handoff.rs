//! The table of (e), contended hand-off: per setup the gap, the rate of
//! hand-offs and their cost, and the targets on them.

use std::fmt::Write;

use super::consensus;
use crate::Settings;
use crate::handoff::{self, Round, Setup};
use crate::stats::{fmt_us, median};
use crate::targets::{Target, push_max, push_min};

pub fn table(md: &mut String, results: &[(Setup, Vec<Round>)], s: &Settings, targets: &mut Vec<Target>) {
    header(md, s);
    for (setup, rounds) in results {
        row(md, *setup, rounds);
    }
    let _ = writeln!(
        md,
        "\nThe gap runs from the holder calling release to the next holder's lock call returning. \
         Requests are the commands clients sent (SET, EVAL/EVALSHA, SUBSCRIBE, PING, ...), \
         counted with MONITOR in one extra round per setup that is not timed; all commands \
         (INFO commandstats) add those run inside the scripts (GET, DEL, PUBLISH, ZPOPMIN, ...). \
         Client CPU is this \
         process's user + system time (10 ms ticks) over the round.\n"
    );
    let on_stores: Vec<Setup> = results
        .iter()
        .map(|(setup, _)| *setup)
        .filter(|setup| !setup.on_redis())
        .collect();
    if !on_stores.is_empty() {
        consensus::handoff_note(md, &on_stores);
    }
    for setup in [Setup::OursShared, Setup::OursPerTask] {
        plain_targets(results, setup, targets);
    }
    fenced_targets(results, targets);
}

/// The median over rounds of `f`, over the rounds that have a value.
fn med(rounds: &[Round], f: impl Fn(&Round) -> Option<f64>) -> Option<f64> {
    median(rounds.iter().filter_map(f))
}

/// The rounds of `setup`, if it ran.
fn rounds_of(results: &[(Setup, Vec<Round>)], setup: Setup) -> Option<&[Round]> {
    results
        .iter()
        .find(|(s, _)| *s == setup)
        .map(|(_, r)| r.as_slice())
}

/// Median over rounds of `setup`'s `f` / rslock's `f`, each ratio within a
/// round.
fn ratio_to_rslock(results: &[(Setup, Vec<Round>)], setup: Setup, f: fn(&Round) -> f64) -> Option<f64> {
    let (ours, theirs) = (rounds_of(results, setup)?, rounds_of(results, Setup::Rslock)?);
    median(ours.iter().zip(theirs).map(|(a, b)| f(a) / f(b)))
}

fn header(md: &mut String, s: &Settings) {
    let _ = writeln!(
        md,
        "### (e) Contended hand-off: {} waiters, {} nodes, {} ms hold, {} rounds of {} acquisitions\n",
        handoff::WAITERS,
        handoff::N,
        handoff::HOLD.as_millis(),
        s.handoff_rounds,
        s.handoff_target
    );
    let _ = writeln!(
        md,
        "| waiters | gap p50 | gap p99 | hand-offs/s | requests / hand-off | all commands / hand-off | client CPU / hand-off | acquisitions per task (min-max) |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|--:|--:|");
}

/// One setup's row: medians over its rounds, the fewest and most
/// acquisitions of one task over all rounds, and failed waits if any.
fn row(md: &mut String, setup: Setup, rounds: &[Round]) {
    let (lo, hi) = (
        rounds.iter().map(|r| r.min_max.0).min().unwrap_or(0),
        rounds.iter().map(|r| r.min_max.1).max().unwrap_or(0),
    );
    let errors: usize = rounds.iter().map(|r| r.errors).sum();
    // Requests and commands are counted on the Redis nodes.
    let count = |f: fn(&Round) -> f64| match setup.on_redis() {
        true => format!("{:.1}", med(rounds, |r| Some(f(r))).unwrap_or(0.0)),
        false => "-".into(),
    };
    let _ = writeln!(
        md,
        "| {}{} | {} | {} | {:.0} | {} | {} | {} | {lo}-{hi} |",
        setup.label(),
        if errors > 0 {
            format!(" ({errors} failed waits)")
        } else {
            String::new()
        },
        fmt_us(med(rounds, Round::gap_p50)),
        fmt_us(med(rounds, Round::gap_p99)),
        med(rounds, |r| Some(r.rate())).unwrap_or(0.0),
        count(Round::requests_per_handoff),
        count(Round::commands_per_handoff),
        fmt_us(med(rounds, |r| Some(r.cpu_per_handoff_us()))),
    );
}

/// The targets of a plain quorumlock setup: its gaps, and its rate and
/// costs against rslock's.
fn plain_targets(results: &[(Setup, Vec<Round>)], setup: Setup, targets: &mut Vec<Target>) {
    let Some(rounds) = rounds_of(results, setup) else {
        return;
    };
    let who = if setup == Setup::OursShared {
        "one client"
    } else {
        "16 clients"
    };
    let ms = |us: Option<f64>| us.map(|v| v / 1e3);
    let p50 = ms(med(rounds, Round::gap_p50));
    push_max(targets, "(e)", &format!("{who}: gap p50 <= 1 ms"), p50, 1.0);
    let p99 = ms(med(rounds, Round::gap_p99));
    push_max(targets, "(e)", &format!("{who}: gap p99 <= 5 ms"), p99, 5.0);
    let rate = ratio_to_rslock(results, setup, Round::rate);
    push_min(
        targets,
        "(e)",
        &format!("{who}: hand-offs/s >= 3x rslock's"),
        rate,
        3.0,
    );
    let requests = ratio_to_rslock(results, setup, Round::requests_per_handoff);
    push_max(
        targets,
        "(e)",
        &format!("{who}: requests per hand-off <= 2x rslock's"),
        requests,
        2.0,
    );
    let all = ratio_to_rslock(results, setup, Round::commands_per_handoff);
    push_max(
        targets,
        "(e)",
        &format!("{who}: all commands per hand-off (incl. inside scripts) <= 2x rslock's"),
        all,
        2.0,
    );
}

/// The targets of the fenced setup: fencing costs one more round trip per
/// acquisition, and the hand-off is still to beat rslock's as the plain
/// one does.
fn fenced_targets(results: &[(Setup, Vec<Round>)], targets: &mut Vec<Target>) {
    let Some(rounds) = rounds_of(results, Setup::OursFenced) else {
        return;
    };
    let p50 = med(rounds, Round::gap_p50).map(|us| us / 1e3);
    push_max(targets, "(e)", "fenced, one client: gap p50 <= 1 ms", p50, 1.0);
    let rate = ratio_to_rslock(results, Setup::OursFenced, Round::rate);
    push_min(
        targets,
        "(e)",
        "fenced, one client: hand-offs/s >= 3x rslock's",
        rate,
        3.0,
    );
}
