//! `quorumlock check` on Redis nodes for Redlock: each node's latency,
//! version, role, persistence and clock ([`node`]), its permissions
//! ([`access`]) and the `--key` states ([`keys`]); a Redis Cluster or a
//! Sentinel-managed master as one node ([`member`], [`shard`]); every
//! command through [`command`]. Then whether a majority of the nodes is
//! usable, and no server counted twice.

mod access;
mod command;
pub(super) mod keys;
pub(super) mod member;
mod node;
mod shard;

use std::process::ExitCode;

use super::output::{self, Column};
use super::{Args, Report, Store, summarize};
use crate::nodes::Resolved;

const REDIS: Store = Store {
    purpose: "Redlock",
    unit: "nodes",
    row: "node",
    columns: COLUMNS,
    even: "even_nodes",
    shortfall: |usable, n, majority| {
        format!("only {usable} of {n} nodes are usable and a majority needs {majority}: no lock can be taken")
    },
};

/// A node's columns: persistence and the clock matter to Redlock, as a
/// node that forgets a key or whose clock runs fast lets a second owner in.
const COLUMNS: &[Column] = &[
    Column::new("ping", output::latency),
    output::VERSION,
    output::ROLE,
    Column::new("appendonly", |r| output::dash(&r.appendonly)),
    Column::new("appendfsync", |r| output::dash(&r.appendfsync)),
    Column::new("clock offset", |r| {
        r.offset
            .map_or("-".into(), |(ms, err)| format!("{ms:+.1} ms ±{err:.1}"))
    }),
    Column::new("clock rate", |r| {
        r.rate
            .map_or("-".into(), |(rate, err)| format!("{rate:.4}x ±{err:.4}"))
    }),
];

/// Probes every node at once, then prints the table or the JSON object.
pub(super) async fn run(nodes: &Resolved, args: &Args) -> ExitCode {
    let drift = quorumlock::probe::default_drift(args.ttl);
    let probes = nodes.urls.iter().map(|url| async {
        if member::is_member(url) {
            member::probe(url, nodes, args, drift).await
        } else {
            node::probe(url, nodes, args, drift, None).await
        }
    });
    let mut reports = futures::future::join_all(probes).await;
    mark_duplicates(&mut reports);
    for report in &mut reports {
        keys::fill_unknown(report, &args.keys);
    }
    let summary = summarize(&reports, Vec::new(), (reports.len(), args.strict), &REDIS);
    if args.json {
        println!("{}", output::json(&reports, &summary));
    } else {
        print!("{}", output::human(&reports, &summary, &args.keys));
    }
    ExitCode::from(summary.code)
}

/// An error on each node that is a server listed before (by `run_id`, its
/// servers' included): listed twice, it would count twice towards the
/// majority, and one crash would take two votes.
fn mark_duplicates(reports: &mut [Report]) {
    for i in 0..reports.len() {
        let earlier = (0..i).find(|&j| {
            reports[i]
                .run_ids()
                .any(|id| reports[j].run_ids().any(|other| other == id))
        });
        if let Some(j) = earlier {
            reports[i].error(
                "duplicate",
                format!(
                    "same server as node {} (run_id): listed twice, it would count twice towards the majority",
                    j + 1
                ),
            );
        }
    }
}
