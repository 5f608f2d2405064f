//! The tables of (b), throughput on keys of their own: cycles/s per
//! contender, task count and N, CPU time per cycle, the ratios between
//! contenders, and the targets on those ratios.

use std::fmt::Write;

use super::consensus;
use crate::Settings;
use crate::contender::Kind;
use crate::stats::{fmt_ratio, median};
use crate::targets::{Target, push_max, push_min};
use crate::throughput::{self, Rate};

pub fn tables(md: &mut String, rates: &[Rate], s: &Settings, targets: &mut Vec<Target>) {
    rates_table(md, rates, s);
    failures(md, rates);
    cpu_table(md, rates);
    ratio_table(md, rates);
    consensus::throughput_table(md, rates);
    batching_targets(rates, targets);
}

/// The rates of `kind` with `tasks` tasks at `n` nodes, if measured.
fn rate_of(rates: &[Rate], kind: Kind, tasks: usize, n: usize) -> Option<&Rate> {
    rates
        .iter()
        .find(|r| r.kind == kind && r.tasks == tasks && r.n == n)
}

/// Contender and task count of every row: all contenders with 64 tasks,
/// then those also measured with 256.
fn rows() -> impl Iterator<Item = (Kind, usize)> {
    throughput::KINDS_64
        .iter()
        .map(|k| (*k, 64))
        .chain(throughput::KINDS_256.iter().map(|k| (*k, 256)))
}

/// Median over rounds of `a`'s rate / `b`'s rate, each ratio within a round.
fn rate_ratio(rates: &[Rate], a: Kind, b: Kind, tasks: usize, n: usize) -> Option<f64> {
    let (a, b) = (rate_of(rates, a, tasks, n)?, rate_of(rates, b, tasks, n)?);
    median(a.rounds.iter().zip(&b.rounds).map(|(x, y)| x / y))
}

fn rates_table(md: &mut String, rates: &[Rate], s: &Settings) {
    let _ = writeln!(
        md,
        "### (b) Throughput: tasks on keys of their own, {:.1} s windows, cycles/s\n",
        s.window.window.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "| contender | tasks | N=1 | N=3 | N=5 |\n|---|--:|--:|--:|--:|"
    );
    for (kind, tasks) in rows() {
        let mut row = format!(
            "| {} | {tasks}{} |",
            kind.label(),
            if kind == Kind::Redlock { " threads" } else { "" }
        );
        for n in throughput::NS {
            let cell = rate_of(rates, kind, tasks, n).map_or("-".into(), |r| {
                let errors = if r.errors > 0 {
                    format!(" ({} errors)", r.errors)
                } else {
                    String::new()
                };
                format!("{:.0}{errors}", r.median().unwrap_or(0.0))
            });
            let _ = write!(row, " {cell} |");
        }
        let _ = writeln!(md, "{row}");
    }
}

/// One line per contender, task count and N with failed cycles.
fn failures(md: &mut String, rates: &[Rate]) {
    for rate in rates.iter().filter(|r| r.errors > 0) {
        let _ = writeln!(
            md,
            "\n{} with {} tasks at N={}: {} failed cycles, the first: {}",
            rate.kind.label(),
            rate.tasks,
            rate.n,
            rate.errors,
            rate.first_error.as_deref().unwrap_or("?")
        );
    }
}

fn cpu_table(md: &mut String, rates: &[Rate]) {
    let _ = writeln!(
        md,
        "\nCPU time per cycle at N=5 (µs; median over rounds), of the client process and of the five \
         nodes together:\n"
    );
    let _ = writeln!(md, "| contender | tasks | client | nodes |\n|---|--:|--:|--:|");
    for (kind, tasks) in rows() {
        if let Some(r) = rate_of(rates, kind, tasks, 5) {
            let med = |v: &[f64]| median(v.iter().copied()).map_or("-".into(), |x| format!("{x:.1}"));
            let _ = writeln!(
                md,
                "| {} | {tasks} | {} | {} |",
                kind.label(),
                med(&r.client_us),
                med(&r.server_us)
            );
        }
    }
}

fn ratio_table(md: &mut String, rates: &[Rate]) {
    let _ = writeln!(md, "\nRatios of cycles/s (median of per-round ratios):\n");
    let _ = writeln!(md, "| ratio | tasks | N=1 | N=3 | N=5 |\n|---|--:|--:|--:|--:|");
    for tasks in [64, 256] {
        for (a, b) in [
            (Kind::Ours, Kind::Raw),
            (Kind::Rslock, Kind::Raw),
            (Kind::Ours, Kind::Rslock),
        ] {
            let mut row = format!("| {} / {} | {tasks} |", a.label(), b.label());
            for n in throughput::NS {
                let _ = write!(row, " {} |", fmt_ratio(rate_ratio(rates, a, b, tasks, n)));
            }
            let _ = writeln!(md, "{row}");
        }
    }
    let _ = writeln!(md);
}

/// Batching is to make quorumlock faster than the raw limit and cheaper in
/// CPU per cycle from 64 tasks on, at N = 3 and 5; with 256 tasks no slower
/// than the 1.5x raw of the full run before the batches' acquires became
/// top-level commands.
fn batching_targets(rates: &[Rate], targets: &mut Vec<Target>) {
    let ours_over_raw = |tasks, n| rate_ratio(rates, Kind::Ours, Kind::Raw, tasks, n);
    for (what, tasks, n, min) in [
        ("N=5, 64 tasks: >= 1.3x raw (batching)", 64, 5, 1.3),
        ("N=3, 64 tasks: >= 1.2x raw (batching)", 64, 3, 1.2),
        ("N=5, 256 tasks: >= 1.5x raw (batching)", 256, 5, 1.5),
    ] {
        push_min(targets, "(b)", what, ours_over_raw(tasks, n), min);
    }
    // CPU per cycle, the median of per-round ratios like the rates.
    let cpu_ratio = |tasks: usize, cpu: fn(&Rate) -> &[f64]| -> Option<f64> {
        let (ours, raw) = (
            rate_of(rates, Kind::Ours, tasks, 5)?,
            rate_of(rates, Kind::Raw, tasks, 5)?,
        );
        median(cpu(ours).iter().zip(cpu(raw)).map(|(x, y)| x / y))
    };
    push_max(
        targets,
        "(b)",
        "N=5, 64 tasks: client CPU per cycle <= 0.6x raw's",
        cpu_ratio(64, |r| &r.client_us),
        0.6,
    );
    push_max(
        targets,
        "(b)",
        "N=5, 64 tasks: node CPU per cycle <= raw's",
        cpu_ratio(64, |r| &r.server_us),
        1.0,
    );
}
