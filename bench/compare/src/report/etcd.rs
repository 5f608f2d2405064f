//! The tables of quorumlock on etcd, each beside the N=5 rows of its
//! scenario: (a) latency, (b) throughput with CPU per cycle, and the note
//! under the hand-off table of (e) (whose row is that table's).

use std::fmt::Write;

use crate::contender::Kind;
use crate::etcd::{BESIDE, MEMBERS, TASKS};
use crate::rounds::{self, Series};
use crate::stats::{fmt_ratio, median, median_ratio};
use crate::throughput::Rate;

/// What the store column says of etcd.
const STORE: &str = "3 etcd members";

fn find(series: &[Series], kind: Kind) -> Option<&Series> {
    let n = if kind == Kind::Etcd { MEMBERS } else { BESIDE };
    series.iter().find(|s| s.kind == kind && s.n == n)
}

fn store(kind: Kind) -> String {
    match kind {
        Kind::Etcd => STORE.into(),
        _ => format!("{BESIDE} Redis nodes"),
    }
}

/// (a): etcd's p50 and p99 beside quorumlock's at N=5, plain and fenced
/// (etcd's locks always carry a fencing token: the fenced row is the like
/// for like), with the ratio within rounds. Nothing when etcd did not run.
pub fn single_table(md: &mut String, series: &[Series]) {
    let Some(etcd) = find(series, Kind::Etcd) else {
        return;
    };
    let _ = writeln!(
        md,
        "\nquorumlock on etcd ({MEMBERS} members) beside the N={BESIDE} rows, in the same rounds:\n"
    );
    let _ = writeln!(
        md,
        "| contender | store | p50 | p99 | etcd p50 / this p50 |\n|---|---|--:|--:|--:|"
    );
    for kind in [Kind::Ours, Kind::Fenced, Kind::Etcd] {
        let Some(s) = find(series, kind) else {
            continue;
        };
        let ratio = (kind != Kind::Etcd)
            .then(|| median_ratio(&rounds::p50s(&etcd.rounds), &rounds::p50s(&s.rounds)))
            .flatten();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            kind.label(),
            store(kind),
            s.cell(s.p50()),
            s.cell(s.p99()),
            fmt_ratio(ratio)
        );
    }
    let _ = writeln!(
        md,
        "\netcd leases count whole seconds; the {} s ttl of every contender is one already.",
        crate::contender::TTL.as_secs()
    );
}

fn rate_of(rates: &[Rate], kind: Kind) -> Option<&Rate> {
    let n = if kind == Kind::Etcd { MEMBERS } else { BESIDE };
    rates
        .iter()
        .find(|r| r.kind == kind && r.n == n && r.tasks == TASKS)
}

/// (b): etcd's cycles/s with 64 tasks beside quorumlock's at N=5, with the
/// CPU time per cycle of the client and of the store's processes (the
/// three members for etcd, the five nodes for Redis).
pub fn throughput_table(md: &mut String, rates: &[Rate]) {
    let Some(etcd) = rate_of(rates, Kind::Etcd) else {
        return;
    };
    let _ = writeln!(
        md,
        "quorumlock on etcd ({MEMBERS} members), {TASKS} tasks, beside N={BESIDE} in the same rounds \
         (CPU per cycle in µs, median over rounds; the store is the five Redis nodes or the three \
         etcd members together):\n"
    );
    let _ = writeln!(
        md,
        "| contender | store | tasks | cycles/s | client CPU | store CPU | etcd / this |\n\
         |---|---|--:|--:|--:|--:|--:|"
    );
    for kind in [Kind::Ours, Kind::Etcd] {
        let Some(r) = rate_of(rates, kind) else {
            continue;
        };
        let med = |v: &[f64]| median(v.iter().copied()).map_or("-".into(), |x| format!("{x:.1}"));
        let ratio = (kind != Kind::Etcd)
            .then(|| median(etcd.rounds.iter().zip(&r.rounds).map(|(x, y)| x / y)))
            .flatten();
        let errors = match r.errors {
            0 => String::new(),
            e => format!(" ({e} errors)"),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {TASKS} | {:.0}{errors} | {} | {} | {} |",
            kind.label(),
            store(kind),
            r.median().unwrap_or(0.0),
            med(&r.client_us),
            med(&r.server_us),
            fmt_ratio(ratio)
        );
    }
    let _ = writeln!(md);
}

/// The note under (e) on the etcd setup's row.
pub fn handoff_note(md: &mut String) {
    let _ = writeln!(
        md,
        "On etcd a waiter's `lock` waits in etcd's queue (a key per waiter, in creation order), woken \
         by a watch on the key before its own; requests and commands are Redis figures, so its row \
         has none.\n"
    );
}
