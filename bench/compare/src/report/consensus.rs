//! The tables of quorumlock on the consensus stores (etcd, ZooKeeper), each
//! beside the N=5 rows of its scenario: (a) latency, (b) throughput with
//! CPU per cycle, and the notes under the hand-off table of (e) (whose rows
//! are that table's). A ratio column per store that ran divides its figure
//! by the row's, all within rounds.

use std::fmt::Write;

use crate::consensus::{self, BESIDE, MEMBERS, TASKS};
use crate::contender::Kind;
use crate::handoff::Setup;
use crate::rounds::{self, Series};
use crate::stats::{fmt_ratio, median, median_ratio};
use crate::throughput::Rate;

/// The N of a kind's rows: its members for a store, else the Redis nodes.
fn n_of(kind: Kind) -> usize {
    if consensus::is_store(kind) {
        MEMBERS
    } else {
        BESIDE
    }
}

fn find(series: &[Series], kind: Kind) -> Option<&Series> {
    series.iter().find(|s| s.kind == kind && s.n == n_of(kind))
}

fn store(kind: Kind) -> String {
    if consensus::is_store(kind) {
        consensus::describe(kind)
    } else {
        format!("{BESIDE} Redis nodes")
    }
}

/// `3 etcd members and 3 ZooKeeper servers`, of the stores that ran.
fn stores_ran(ran: &[Kind]) -> String {
    let names: Vec<String> = ran.iter().map(|&k| consensus::describe(k)).collect();
    names.join(" and ")
}

/// The header and separator of a table whose last columns are one ratio
/// per store: `{store}{what} / this{what}`.
fn header(md: &mut String, columns: &str, aligns: &str, ran: &[Kind], what: &str) {
    let ratios: String = ran
        .iter()
        .map(|&k| format!(" {}{what} / this{what} |", consensus::name(k)))
        .collect();
    let _ = writeln!(md, "{columns}{ratios}\n{aligns}{}", "--:|".repeat(ran.len()));
}

/// (a): the stores' p50 and p99 beside quorumlock's at N=5, plain and
/// fenced (a store's locks always carry a fencing token: the fenced row is
/// the like for like), with the ratios within rounds. Nothing when no store
/// ran.
pub fn single_table(md: &mut String, series: &[Series]) {
    let ran: Vec<Kind> = consensus::KINDS
        .into_iter()
        .filter(|&k| find(series, k).is_some())
        .collect();
    if ran.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\nquorumlock on {} beside the N={BESIDE} rows, in the same rounds:\n",
        stores_ran(&ran)
    );
    header(
        md,
        "| contender | store | p50 | p99 |",
        "|---|---|--:|--:|",
        &ran,
        " p50",
    );
    for kind in [Kind::Ours, Kind::Fenced].into_iter().chain(ran.iter().copied()) {
        let Some(s) = find(series, kind) else {
            continue;
        };
        let mut row = format!(
            "| {} | {} | {} | {} |",
            kind.label(),
            store(kind),
            s.cell(s.p50()),
            s.cell(s.p99())
        );
        for &by in &ran {
            let ratio = (by != kind)
                .then(|| median_ratio(&rounds::p50s(&find(series, by)?.rounds), &rounds::p50s(&s.rounds)))
                .flatten();
            let _ = write!(row, " {} |", fmt_ratio(ratio));
        }
        let _ = writeln!(md, "{row}");
    }
    let ttl = crate::contender::TTL.as_secs();
    if ran.contains(&Kind::Etcd) {
        let _ = writeln!(
            md,
            "\netcd leases count whole seconds; the {ttl} s ttl of every contender is one already."
        );
    }
    if ran.contains(&Kind::ZooKeeper) {
        let _ = writeln!(
            md,
            "\nA ZooKeeper lock lives in its client's session (10 s by default): it is valid for \
             the lesser of the {ttl} s ttl and two thirds of the session from the last heartbeat, \
             one heartbeat renewing every lock of the client. The servers fsync every transaction \
             to their logs before acknowledging it, as etcd's members do, on JVMs tuned to start \
             fast (C1 compiler only, serial GC, 128 MB heap)."
        );
    }
}

fn rate_of(rates: &[Rate], kind: Kind) -> Option<&Rate> {
    rates
        .iter()
        .find(|r| r.kind == kind && r.n == n_of(kind) && r.tasks == TASKS)
}

/// (b): the stores' cycles/s with 64 tasks beside quorumlock's at N=5,
/// with the CPU time per cycle of the client and of the store's processes
/// (a store's three members, the five nodes for Redis).
pub fn throughput_table(md: &mut String, rates: &[Rate]) {
    let ran: Vec<Kind> = consensus::KINDS
        .into_iter()
        .filter(|&k| rate_of(rates, k).is_some())
        .collect();
    if ran.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "quorumlock on {}, {TASKS} tasks, beside N={BESIDE} in the same rounds (CPU per cycle in µs, \
         median over rounds; the store is the five Redis nodes or a consensus store's {MEMBERS} \
         processes together):\n",
        stores_ran(&ran)
    );
    header(
        md,
        "| contender | store | tasks | cycles/s | client CPU | store CPU |",
        "|---|---|--:|--:|--:|--:|",
        &ran,
        "",
    );
    for kind in std::iter::once(Kind::Ours).chain(ran.iter().copied()) {
        let Some(r) = rate_of(rates, kind) else {
            continue;
        };
        let med = |v: &[f64]| median(v.iter().copied()).map_or("-".into(), |x| format!("{x:.1}"));
        let errors = match r.errors {
            0 => String::new(),
            e => format!(" ({e} errors)"),
        };
        let mut row = format!(
            "| {} | {} | {TASKS} | {:.0}{errors} | {} | {} |",
            kind.label(),
            store(kind),
            r.median().unwrap_or(0.0),
            med(&r.client_us),
            med(&r.server_us),
        );
        for &by in &ran {
            let ratio = (by != kind)
                .then(|| {
                    let theirs = &rate_of(rates, by)?.rounds;
                    median(theirs.iter().zip(&r.rounds).map(|(x, y)| x / y))
                })
                .flatten();
            let _ = write!(row, " {} |", fmt_ratio(ratio));
        }
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(md);
}

/// The notes under (e) on the rows of the stores' setups that ran.
pub fn handoff_note(md: &mut String, ran: &[Setup]) {
    let mut notes = Vec::new();
    if ran.contains(&Setup::Etcd) {
        notes.push(
            "On etcd a waiter's `lock` waits in etcd's queue (a key per waiter, in creation order), \
             woken by a watch on the key before its own.",
        );
    }
    if ran.contains(&Setup::ZooKeeper) {
        notes.push(
            "On ZooKeeper it waits in the lock recipe's queue (an ephemeral sequential znode per \
             waiter), woken by a watch on the znode before its own.",
        );
    }
    let _ = writeln!(
        md,
        "{} Requests and commands are Redis figures, so their rows have none.\n",
        notes.join(" ")
    );
}
