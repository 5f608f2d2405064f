//! The markdown tables of a run, one section per scenario, and the
//! targets checked against their figures (see [`crate::targets`]).

mod consensus;
mod handoff;
mod semaphore;
mod shards;
mod throughput;

use std::fmt::Write;

use crate::contender::Kind;
use crate::machine::Machine;
use crate::network::{self, Network};
use crate::rounds::{self, Series};
use crate::stats::{fmt_ratio, fmt_us, median_ratio};
use crate::targets::{self, Target, push_max};
use crate::{Results, Settings, single};

pub fn render(machine: &Machine, settings: &Settings, results: &Results) -> (String, Vec<Target>) {
    let mut md = String::new();
    let mut targets = Vec::new();
    machine_table(&mut md, machine, settings);
    if let Some(single) = &results.single {
        single_tables(&mut md, single, &mut targets);
    }
    if let Some(rates) = &results.throughput {
        throughput::tables(&mut md, rates, settings, &mut targets);
    }
    if let Some(net) = &results.network {
        network_tables(&mut md, net, &mut targets);
    }
    if let Some(handoff) = &results.handoff {
        handoff::table(&mut md, handoff, settings, &mut targets);
    }
    if let Some(configs) = &results.shards {
        shards::tables(&mut md, configs, settings, machine.cpus);
    }
    if let Some(pools) = &results.semaphore {
        semaphore::table(&mut md, pools, settings);
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
    let _ = writeln!(md, "| etcd | {} |", m.etcd);
    let _ = writeln!(md, "| ZooKeeper | {} |", m.zookeeper);
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
    consensus::single_table(md, series);
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
        ("(f)", "fenced p50 <= 1.6x plain", Kind::Fenced, Kind::Ours, 1.6),
    ] {
        for n in single::NS {
            push_max(targets, scenario, &format!("N={n} {what}"), ratio(a, b, n), max);
        }
    }
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
