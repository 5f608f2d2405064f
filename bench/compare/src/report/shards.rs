//! The tables of (g), Redis Cluster members of 1, 2 and 3 shards against
//! plain members: cycles/s, CPU and commands per shard, and the capacity
//! model those figures give.

use std::fmt::Write;

use crate::Settings;
use crate::shards::{Config, MEMBERS, Members, SHARDS, TASKS};
use crate::stats::{fmt_ratio, median};

pub fn tables(md: &mut String, configs: &[Config], s: &Settings, cpus: usize) {
    rates_table(md, configs, s);
    failures(md, configs);
    capacity(md, configs, cpus);
}

fn find(configs: &[Config], members: Members, tasks: usize) -> Option<&Config> {
    configs.iter().find(|c| c.members == members && c.tasks == tasks)
}

fn med(values: &[f64]) -> Option<f64> {
    median(values.iter().copied().filter(|v| v.is_finite()))
}

fn fmt(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// Median over rounds of `c`'s rate / the plain members' rate, each ratio
/// within a round.
fn over_plain(configs: &[Config], c: &Config) -> Option<f64> {
    let plain = find(configs, Members::Plain, c.tasks)?;
    median(c.rounds.iter().zip(&plain.rounds).map(|(x, y)| x / y))
}

fn rates_table(md: &mut String, configs: &[Config], s: &Settings) {
    let _ = writeln!(
        md,
        "### (g) Members of 1, 2 and 3 shards: {MEMBERS} Redis Cluster members, {:.1} s windows\n",
        s.window.window.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "quorumlock with {MEMBERS} members, each a Redis Cluster of S primaries without replicas \
         (`redis+cluster://` URLs; batching is off on cluster primaries), against {MEMBERS} plain \
         redis-server members (batching on) in the same rounds; every cycle on a name of its own, so \
         that the keys spread over the slots. Medians over rounds; CPU from /proc (10 ms ticks); \
         commands are the primaries' `total_commands_processed`, those run inside scripts included.\n"
    );
    let _ = writeln!(
        md,
        "| members | tasks | cycles/s | / plain | client CPU per cycle | node CPU per cycle, all primaries \
         | node CPU per cycle on its shard | commands/s per shard (lowest-highest) | commands per cycle per member |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for members in Members::all() {
        for tasks in TASKS {
            let Some(c) = find(configs, members, tasks) else {
                continue;
            };
            let mean = med(&c.shard_rate.iter().map(|r| r.0).collect::<Vec<_>>());
            let low = med(&c.shard_rate.iter().map(|r| r.1).collect::<Vec<_>>());
            let high = med(&c.shard_rate.iter().map(|r| r.2).collect::<Vec<_>>());
            let _ = writeln!(
                md,
                "| {} | {tasks} | {}{} | {} | {} µs | {} µs | {} µs | {} ({}-{}) | {} |",
                members.label(),
                fmt(c.median(), 0),
                if c.errors > 0 {
                    format!(" ({} errors)", c.errors)
                } else {
                    String::new()
                },
                fmt_ratio(over_plain(configs, c)),
                fmt(med(&c.client_us), 1),
                fmt(med(&c.nodes_us), 1),
                fmt(med(&c.shard_us()), 1),
                fmt(mean, 0),
                fmt(low, 0),
                fmt(high, 0),
                fmt(med(&c.commands_per_cycle), 1),
            );
        }
    }
}

/// One line per configuration with failed cycles.
fn failures(md: &mut String, configs: &[Config]) {
    for c in configs.iter().filter(|c| c.errors > 0) {
        let _ = writeln!(
            md,
            "\n{} with {} tasks: {} failed cycles, the first: {}",
            c.members.label(),
            c.tasks,
            c.errors,
            c.first_error.as_deref().unwrap_or("?")
        );
    }
}

fn capacity(md: &mut String, configs: &[Config], cpus: usize) {
    let _ = write!(md, "\n**Capacity model (g).** ");
    let _ = writeln!(
        md,
        "Each cycle's keys share a hash slot, so on each member one primary serves the whole cycle, \
         at a CPU cost c per cycle (the node CPU per cycle on its shard above). A primary runs on one \
         core, so a member of S shards serves at most about S x (1 core / c) cycles/s, and the quorum \
         no more than its members. Measured c and the capacity it gives:\n"
    );
    let _ = writeln!(
        md,
        "| members | tasks | c (node CPU per cycle on its shard) | capacity S x 1 core / c | measured cycles/s | \
         core used per primary | client bound 1 core / client CPU per cycle |"
    );
    let _ = writeln!(md, "|---|--:|--:|--:|--:|--:|--:|");
    for members in Members::all() {
        for tasks in TASKS {
            let Some(conf) = find(configs, members, tasks) else {
                continue;
            };
            let c = med(&conf.shard_us());
            let capacity = c.map(|c| members.shards() as f64 * 1e6 / c);
            let used = c
                .zip(conf.median())
                .map(|(c, rate)| rate * c / 1e6 / members.shards() as f64);
            let client = med(&conf.client_us).map(|us| 1e6 / us);
            let _ = writeln!(
                md,
                "| {} | {tasks} | {} µs | {} | {} | {} | {} |",
                members.label(),
                fmt(c, 1),
                fmt(capacity, 0),
                fmt(conf.median(), 0),
                fmt(used, 2),
                fmt(client, 0),
            );
        }
    }
    let _ = writeln!(md);
    let cs: Vec<String> = SHARDS
        .iter()
        .filter_map(|&s| {
            let c = med(&find(configs, Members::Shards(s), 256)?.shard_us())?;
            Some(format!("{c:.1} µs with {s}"))
        })
        .collect();
    let rates: Vec<f64> = SHARDS
        .iter()
        .filter_map(|&s| find(configs, Members::Shards(s), 256)?.median())
        .collect();
    let (low, high) = rates
        .iter()
        .fold((f64::INFINITY, 0.0_f64), |(l, h), &r| (l.min(r), h.max(r)));
    let _ = writeln!(
        md,
        "Measured with 256 tasks, c was {} shard(s) per member. This machine has {cpus} cores for \
         the {MEMBERS} x S primaries ({} at {} shards) and the client, {}: with 256 tasks it \
         stayed between {} and {} cycles/s. The model holds while each primary has a core of its own \
         and the client is not the limit (its bound, one core over its CPU per cycle, is the last \
         column): past that, adding shards adds nothing.{}\n",
        if cs.is_empty() { "-".into() } else { cs.join(", ") },
        MEMBERS * SHARDS[SHARDS.len() - 1],
        SHARDS[SHARDS.len() - 1],
        if cpus <= MEMBERS * SHARDS[SHARDS.len() - 1] {
            "so throughput cannot grow with shards here"
        } else {
            "so each primary may have a core of its own"
        },
        fmt((!rates.is_empty()).then_some(low), 0),
        fmt((!rates.is_empty()).then_some(high), 0),
        client_limits(configs),
    );
}

/// Whether the client's bound was below the shards' capacity in every
/// cluster configuration: then the client, not the shards, set the rate.
fn client_limits(configs: &[Config]) -> String {
    let clusters = configs.iter().filter(|c| c.members != Members::Plain);
    let bounds: Vec<(f64, f64)> = clusters
        .filter_map(|c| {
            let client = 1e6 / med(&c.client_us)?;
            let capacity = c.members.shards() as f64 * 1e6 / med(&c.shard_us())?;
            Some((client, capacity))
        })
        .collect();
    if bounds.is_empty() || bounds.iter().any(|(client, capacity)| client >= capacity) {
        return String::new();
    }
    let most = bounds.iter().map(|b| b.0).fold(0.0_f64, f64::max);
    let least = bounds.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
    format!(
        " In this run the client's bound (at most {most:.0} cycles/s) was below the shards' capacity \
         (at least {least:.0} cycles/s) in every cluster configuration: the client, sharing the cores \
         with the primaries, set the rate, not the shards."
    )
}
