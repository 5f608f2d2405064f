//! The markdown tables of a run, one section per scenario, and the
//! targets checked against their figures (see [`crate::targets`]).

use std::fmt::Write;

use crate::contender::Kind;
use crate::handoff::{self, Setup};
use crate::machine::Machine;
use crate::network::{self, Network};
use crate::rounds::{self, Series};
use crate::stats::{fmt_ratio, fmt_us, median, median_ratio};
use crate::targets::{self, Target, push_below, push_max, push_min};
use crate::throughput::{self, Rate};
use crate::{Results, Settings, single};

pub fn render(machine: &Machine, settings: &Settings, results: &Results) -> (String, Vec<Target>) {
    let mut md = String::new();
    let mut targets = Vec::new();
    machine_table(&mut md, machine, settings);
    if let Some(single) = &results.single {
        single_tables(&mut md, single, &mut targets);
    }
    if let Some(rates) = &results.throughput {
        throughput_tables(&mut md, rates, settings, &mut targets);
    }
    if let Some(net) = &results.network {
        network_tables(&mut md, net, &mut targets);
    }
    if let Some(handoff) = &results.handoff {
        handoff_table(&mut md, handoff, settings, &mut targets);
    }
    targets::table(&mut md, &targets);
    (md, targets)
}

fn machine_table(md: &mut String, m: &Machine, s: &Settings) {
    let _ = writeln!(md, "### Run\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    let _ = writeln!(md, "| date | {} |", m.date);
    let _ = writeln!(md, "| command | `{}` |", m.command);
    let _ = writeln!(md, "| CPUs (`nproc`) | {} |", m.cpus);
    let _ = writeln!(md, "| CPU model | {} |", m.cpu_model);
    let _ = writeln!(md, "| kernel | {} |", m.kernel);
    let _ = writeln!(md, "| redis-server | {} |", m.redis);
    let _ = writeln!(md, "| rustc | {} |", m.rustc);
    for (name, versions) in &m.crates {
        let _ = writeln!(md, "| crate {name} | {versions} |");
    }
    let _ = writeln!(
        md,
        "| load average (1/5/15 min) | {} at the start, {} at the end: the machine was shared with other jobs |",
        m.load_before, m.load_after
    );
    let _ = writeln!(
        md,
        "| client | one tokio current_thread runtime; proxies on a runtime of their own |"
    );
    let _ = writeln!(md, "| settings | {} |", s.describe());
    let _ = writeln!(md, "| duration | {:.0} s |\n", m.duration_s);
}

fn find(series: &[Series], kind: Kind, n: usize) -> Option<&Series> {
    series.iter().find(|s| s.kind == kind && s.n == n)
}

/// Median over rounds of `a`'s p50 / `b`'s p50, each ratio within a round.
fn p50_ratio(a: Option<&Series>, b: Option<&Series>) -> Option<f64> {
    median_ratio(&rounds::p50s(&a?.rounds), &rounds::p50s(&b?.rounds))
}

fn single_tables(md: &mut String, series: &[Series], targets: &mut Vec<Target>) {
    let _ = writeln!(md, "### (a) One task, uncontended lock+unlock, local nodes\n");
    let _ = writeln!(
        md,
        "| contender | N=1 p50 | N=1 p99 | N=3 p50 | N=3 p99 | N=5 p50 | N=5 p99 |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|--:|");
    for kind in single::KINDS {
        let mut row = format!("| {} |", kind.label());
        for n in single::NS {
            match find(series, kind, n) {
                Some(s) => {
                    let _ = write!(row, " {} | {} |", s.cell(s.p50()), s.cell(s.p99()));
                }
                None => row.push_str(" - | - |"),
            }
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(
        md,
        "\nRatios of p50, each the median over rounds of the ratio within a round:\n"
    );
    let _ = writeln!(md, "| ratio | N=1 | N=3 | N=5 |\n|---|--:|--:|--:|");
    let pairs = [
        (Kind::Ours, Kind::Raw),
        (Kind::Ours, Kind::RawAll),
        (Kind::Ours, Kind::Rslock),
        (Kind::Rslock, Kind::Raw),
        (Kind::Redlock, Kind::Raw),
        (Kind::Fenced, Kind::Ours),
    ];
    for (a, b) in pairs {
        let mut row = format!("| {} / {} |", a.label(), b.label());
        for n in single::NS {
            let _ = write!(
                row,
                " {} |",
                fmt_ratio(p50_ratio(find(series, a, n), find(series, b, n)))
            );
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md, "\n### (f) Fenced vs plain lock+unlock (same rounds as (a))\n");
    let _ = writeln!(
        md,
        "| N | plain p50 | fenced p50 | fenced / plain |\n|--:|--:|--:|--:|"
    );
    for n in single::NS {
        let (plain, fenced) = (find(series, Kind::Ours, n), find(series, Kind::Fenced, n));
        let _ = writeln!(
            md,
            "| {n} | {} | {} | {} |",
            fmt_us(plain.and_then(Series::p50)),
            fmt_us(fenced.and_then(Series::p50)),
            fmt_ratio(p50_ratio(fenced, plain))
        );
    }
    let _ = writeln!(md);
    let ratio = |a, b, n| p50_ratio(find(series, a, n), find(series, b, n));
    for (scenario, what, a, b, max) in [
        ("(a)", "p50 <= 1.05x raw", Kind::Ours, Kind::Raw, 1.05),
        ("(a)", "p50 <= rslock's", Kind::Ours, Kind::Rslock, 1.0),
        ("(f)", "fenced p50 <= 1.55x plain", Kind::Fenced, Kind::Ours, 1.55),
    ] {
        for n in single::NS {
            push_max(targets, scenario, &format!("N={n} {what}"), ratio(a, b, n), max);
        }
    }
}

fn throughput_tables(md: &mut String, rates: &[Rate], s: &Settings, targets: &mut Vec<Target>) {
    let _ = writeln!(
        md,
        "### (b) Throughput: tasks on keys of their own, {:.1} s windows, cycles/s\n",
        s.window.window.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "| contender | tasks | N=1 | N=3 | N=5 |\n|---|--:|--:|--:|--:|"
    );
    let get = |kind: Kind, tasks: usize, n: usize| {
        rates
            .iter()
            .find(|r| r.kind == kind && r.tasks == tasks && r.n == n)
    };
    let rows = throughput::KINDS_64
        .iter()
        .map(|k| (*k, 64))
        .chain(throughput::KINDS_256.iter().map(|k| (*k, 256)));
    for (kind, tasks) in rows.clone() {
        let mut row = format!(
            "| {} | {tasks}{} |",
            kind.label(),
            if kind == Kind::Redlock { " threads" } else { "" }
        );
        for n in throughput::NS {
            let cell = get(kind, tasks, n).map_or("-".into(), |r| {
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
    let _ = writeln!(
        md,
        "\nCPU time per cycle at N=5 (µs; median over rounds), of the client process and of the five \
         nodes together:\n"
    );
    let _ = writeln!(md, "| contender | tasks | client | nodes |\n|---|--:|--:|--:|");
    for (kind, tasks) in rows {
        if let Some(r) = get(kind, tasks, 5) {
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
    let ratio = |a: Kind, b: Kind, tasks: usize, n: usize| -> Option<f64> {
        let (a, b) = (get(a, tasks, n)?, get(b, tasks, n)?);
        median(a.rounds.iter().zip(&b.rounds).map(|(x, y)| x / y))
    };
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
                let _ = write!(row, " {} |", fmt_ratio(ratio(a, b, tasks, n)));
            }
            let _ = writeln!(md, "{row}");
        }
    }
    let _ = writeln!(md);
    push_min(
        targets,
        "(b)",
        "N=5, 64 tasks: >= 1.4x raw (batching)",
        ratio(Kind::Ours, Kind::Raw, 64, 5),
        1.4,
    );
    push_min(
        targets,
        "(b)",
        "N=5, 256 tasks: >= 1.6x raw (batching)",
        ratio(Kind::Ours, Kind::Raw, 256, 5),
        1.6,
    );
    push_min(
        targets,
        "(b)",
        "N=3, 64 tasks: >= 1.3x raw (batching)",
        ratio(Kind::Ours, Kind::Raw, 64, 3),
        1.3,
    );
    // CPU per cycle, the median of per-round ratios like the rates.
    let cpu_ratio = |tasks: usize, cpu: fn(&Rate) -> &[f64]| -> Option<f64> {
        let (ours, raw) = (get(Kind::Ours, tasks, 5)?, get(Kind::Raw, tasks, 5)?);
        median(cpu(ours).iter().zip(cpu(raw)).map(|(x, y)| x / y))
    };
    push_below(
        targets,
        "(b)",
        "N=5, 64 tasks: client CPU per cycle below raw's",
        cpu_ratio(64, |r| &r.client_us),
        1.0,
    );
    push_below(
        targets,
        "(b)",
        "N=5, 64 tasks: node CPU per cycle below raw's",
        cpu_ratio(64, |r| &r.server_us),
        1.0,
    );
}

fn network_tables(md: &mut String, net: &Network, targets: &mut Vec<Target>) {
    if !net.latency.is_empty() {
        latency_table(md, net, targets);
    }
    if !net.holed.is_empty() {
        hole_table(md, net, targets);
    }
}

fn latency_table(md: &mut String, net: &Network, targets: &mut Vec<Target>) {
    let _ = writeln!(
        md,
        "### (c) Every node behind a proxy adding {} ms each way: lock+unlock\n\n\
         A PING round trip through one proxy took {} (p50): the proxy's timer rounds each delay \
         up to its next millisecond tick.\n",
        network::LATENCY.as_millis(),
        fmt_us(net.ping_p50)
    );
    let _ = writeln!(
        md,
        "| contender | N=1 p50 | N=5 p50 | N=5 / N=1 | N=5 p99 | N=5 / raw N=5 |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|");
    let raw5 = find(&net.latency, Kind::Raw, 5);
    for kind in network::KINDS_C {
        let (one, five) = (find(&net.latency, kind, 1), find(&net.latency, kind, 5));
        let cell = |s: Option<&Series>, v: fn(&Series) -> Option<f64>| s.map_or("-".into(), |s| s.cell(v(s)));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            kind.label(),
            cell(one, Series::p50),
            cell(five, Series::p50),
            fmt_ratio(p50_ratio(five, one)),
            cell(five, Series::p99),
            fmt_ratio(p50_ratio(five, raw5)),
        );
    }
    let _ = writeln!(md);
    let ours = p50_ratio(
        find(&net.latency, Kind::Ours, 5),
        find(&net.latency, Kind::Ours, 1),
    );
    push_max(
        targets,
        "(c)",
        "~1 ms each way: N=5 p50 <= 1.1x N=1 p50",
        ours,
        1.1,
    );
}

fn hole_table(md: &mut String, net: &Network, targets: &mut Vec<Target>) {
    let _ = writeln!(
        md,
        "### (d) One of five nodes black-holed (same 1 ms proxies): lock+unlock\n"
    );
    let _ = writeln!(
        md,
        "| contender | healthy p50 | one black-holed p50 | black-holed p99 | ratio |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|");
    for kind in network::KINDS_D {
        let (h, b) = (find(&net.healthy, kind, 5), find(&net.holed, kind, 5));
        let cell = |s: Option<&Series>, v: fn(&Series) -> Option<f64>| s.map_or("-".into(), |s| s.cell(v(s)));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            kind.label(),
            cell(h, Series::p50),
            cell(b, Series::p50),
            cell(b, Series::p99),
            fmt_ratio(p50_ratio(b, h)),
        );
    }
    let _ = writeln!(md);
    let ours = p50_ratio(find(&net.holed, Kind::Ours, 5), find(&net.healthy, Kind::Ours, 5));
    push_max(
        targets,
        "(d)",
        "one of five black-holed: p50 <= 1.05x healthy",
        ours,
        1.05,
    );
}

fn handoff_table(
    md: &mut String,
    results: &[(Setup, Vec<handoff::Round>)],
    s: &Settings,
    targets: &mut Vec<Target>,
) {
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
    let med = |rounds: &[handoff::Round], f: fn(&handoff::Round) -> Option<f64>| {
        median(rounds.iter().filter_map(f))
    };
    for (setup, rounds) in results {
        let (lo, hi) = (
            rounds.iter().map(|r| r.min_max.0).min().unwrap_or(0),
            rounds.iter().map(|r| r.min_max.1).max().unwrap_or(0),
        );
        let errors: usize = rounds.iter().map(|r| r.errors).sum();
        let _ = writeln!(
            md,
            "| {}{} | {} | {} | {:.0} | {:.1} | {:.1} | {} | {lo}-{hi} |",
            setup.label(),
            if errors > 0 {
                format!(" ({errors} failed waits)")
            } else {
                String::new()
            },
            fmt_us(med(rounds, handoff::Round::gap_p50)),
            fmt_us(med(rounds, handoff::Round::gap_p99)),
            med(rounds, |r| Some(r.rate())).unwrap_or(0.0),
            med(rounds, |r| Some(r.requests_per_handoff())).unwrap_or(0.0),
            med(rounds, |r| Some(r.commands_per_handoff())).unwrap_or(0.0),
            fmt_us(med(rounds, |r| Some(r.cpu_per_handoff_us()))),
        );
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
    let rounds_of = |setup: Setup| results.iter().find(|(s, _)| *s == setup).map(|(_, r)| r);
    let ratio = |setup: Setup, f: fn(&handoff::Round) -> f64| -> Option<f64> {
        let (ours, theirs) = (rounds_of(setup)?, rounds_of(Setup::Rslock)?);
        median(ours.iter().zip(theirs).map(|(a, b)| f(a) / f(b)))
    };
    for setup in [Setup::OursShared, Setup::OursPerTask] {
        let Some(rounds) = rounds_of(setup) else { continue };
        let who = if setup == Setup::OursShared {
            "one client"
        } else {
            "16 clients"
        };
        let p50 = med(rounds, handoff::Round::gap_p50);
        let p99 = med(rounds, handoff::Round::gap_p99);
        push_max(
            targets,
            "(e)",
            &format!("{who}: gap p50 <= 1 ms"),
            p50.map(|v| v / 1e3),
            1.0,
        );
        push_max(
            targets,
            "(e)",
            &format!("{who}: gap p99 <= 5 ms"),
            p99.map(|v| v / 1e3),
            5.0,
        );
        let rate = ratio(setup, handoff::Round::rate);
        push_min(
            targets,
            "(e)",
            &format!("{who}: hand-offs/s >= 3x rslock's"),
            rate,
            3.0,
        );
        let requests = ratio(setup, handoff::Round::requests_per_handoff);
        push_max(
            targets,
            "(e)",
            &format!("{who}: requests per hand-off <= 2x rslock's"),
            requests,
            2.0,
        );
        let all = ratio(setup, handoff::Round::commands_per_handoff);
        push_max(
            targets,
            "(e)",
            &format!("{who}: all commands per hand-off (incl. inside scripts) <= 2x rslock's"),
            all,
            2.0,
        );
    }
}
