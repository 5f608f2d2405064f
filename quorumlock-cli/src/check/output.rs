//! The check's two outputs: the human table with its findings, and one JSON
//! object for monitoring (field names documented in `check --help`).

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::redis::keys::KeyState;
use super::redis::member;
use super::{Finding, Level, Report, Store, Summary};

/// The table, each key's state per node, every finding and the verdict.
pub(super) fn human(reports: &[Report], summary: &Summary, keys: &[String]) -> String {
    let mut out = table(reports, summary.store);
    for key in keys {
        let states: Vec<String> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let state = key_state(r, key).map_or("unknown".into(), KeyState::describe);
                format!("node {} {state}", i + 1)
            })
            .collect();
        let _ = writeln!(out, "key {key:?}: {}", states.join(", "));
    }
    for (i, report) in reports.iter().enumerate() {
        let row = summary.store.row;
        if let Some(parts) = report.layout.as_ref().and_then(member::describe) {
            let _ = writeln!(out, "{row} {} ({}): {parts}", i + 1, report.name);
        }
        findings_of(&mut out, &format!("{row} {}", i + 1), report);
        for (k, server) in report.servers.iter().enumerate() {
            findings_of(&mut out, &format!("{row} {}.{}", i + 1, k + 1), server);
        }
    }
    for finding in &summary.findings {
        let _ = writeln!(out, "{}: {}", label(finding.level), finding.message);
    }
    let unlisted = match summary.unlisted {
        0 => String::new(),
        n => format!(", {n} more not listed"),
    };
    let counts = format!(
        "{} of {} {} usable{unlisted}, majority {}",
        summary.usable, summary.nodes, summary.store.unit, summary.majority
    );
    let _ = match summary.worst {
        None => writeln!(
            out,
            "all {} fit for {} ({counts})",
            summary.store.unit, summary.store.purpose
        ),
        Some(Level::Warning) => writeln!(out, "usable with warnings ({counts})"),
        Some(Level::Error) => writeln!(out, "not usable as configured ({counts})"),
    };
    out
}

/// A line for each finding about one row (`row`: "node 2.1").
fn findings_of(out: &mut String, row: &str, report: &Report) {
    for finding in &report.findings {
        let (name, level) = (&report.name, label(finding.level));
        let _ = writeln!(out, "{row} ({name}): {level}: {}", finding.message);
    }
}

/// Everything as one JSON object.
pub(super) fn json(reports: &[Report], summary: &Summary) -> Value {
    let nodes: Vec<Value> = reports.iter().enumerate().map(|(i, r)| node(i + 1, r)).collect();
    json!({
        "status": status(summary.worst),
        "exit_code": summary.code,
        "nodes_total": summary.nodes,
        "usable": summary.usable,
        "majority": summary.majority,
        "nodes": nodes,
        "findings": findings(&summary.findings),
    })
}

/// One node, or one server of a member (`index` counts from 1 among them),
/// as a JSON object: a member adds what it is made of and its servers.
fn node(index: usize, r: &Report) -> Value {
    let mut object = json!({
                "index": index,
                "node": r.name,
                "status": status(r.level()),
                "ping_ms": r.ping.map(|p| p.as_secs_f64() * 1000.0),
                "version": text(&r.version),
                "role": text(&r.role),
                "appendonly": text(&r.appendonly),
                "appendfsync": text(&r.appendfsync),
                "clock_offset_ms": r.offset.map(|(ms, _)| ms),
                "clock_uncertainty_ms": r.offset.map(|(_, err)| err),
                "clock_rate": r.rate.map(|(rate, _)| rate),
                "clock_rate_error": r.rate.map(|(_, err)| err),
                "missing_permissions": r.missing,
                "keys": r.keys.iter().map(|k| json!({
                    "key": k.key,
                    "state": k.state.name(),
                    "type": k.kind,
                    "ttl_ms": k.ttl_ms,
                })).collect::<Vec<_>>(),
                "findings": findings(&r.findings),
    });
    if let (Some(layout), Some(fields)) = (&r.layout, object.as_object_mut()) {
        if let Value::Object(member) = member::json(layout) {
            fields.extend(member);
        }
        let servers = r.servers.iter().enumerate().map(|(k, s)| node(k + 1, s));
        fields.insert("servers".into(), servers.collect());
    }
    object
}

fn findings(findings: &[Finding]) -> Vec<Value> {
    findings
        .iter()
        .map(|f| json!({"level": f.level.name(), "code": f.code, "message": f.message}))
        .collect()
}

fn status(level: Option<Level>) -> &'static str {
    level.map_or("ok", Level::name)
}

fn text(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

fn key_state<'a>(report: &'a Report, key: &str) -> Option<&'a KeyState> {
    report.keys.iter().find(|k| k.key == key)
}

fn label(level: Level) -> &'static str {
    match level {
        Level::Warning => "warning",
        Level::Error => "ERROR",
    }
}

/// One column of the table: its heading and a row's cell.
pub(super) struct Column {
    header: &'static str,
    cell: fn(&Report) -> String,
}

impl Column {
    pub(super) const fn new(header: &'static str, cell: fn(&Report) -> String) -> Column {
        Column { header, cell }
    }
}

/// The version column every store has.
pub(super) const VERSION: Column = Column::new("version", |r| dash(&r.version));

/// The role column: a Redis node's replication role, an etcd member's
/// leadership; a ZooKeeper server's mode heads it "mode".
pub(super) const ROLE: Column = Column::new("role", |r| dash(&r.role));

/// A row's round trip, in milliseconds.
pub(super) fn latency(r: &Report) -> String {
    r.ping
        .map_or("-".into(), |p| format!("{:.2} ms", p.as_secs_f64() * 1000.0))
}

/// The table of all rows (a member's servers after it): the row's number,
/// its name under the store's word for a row, the store's columns, its
/// status.
fn table(reports: &[Report], store: &Store) -> String {
    let columns = store.columns;
    let header: Vec<&str> = ["#", store.row]
        .into_iter()
        .chain(columns.iter().map(|c| c.header))
        .chain(["status"])
        .collect();
    let rows: Vec<Vec<String>> = reports
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let servers = r.servers.iter().enumerate();
            let servers = servers.map(move |(k, s)| (format!("{}.{}", i + 1, k + 1), s));
            std::iter::once(((i + 1).to_string(), r)).chain(servers)
        })
        .map(|(number, r)| {
            let status = match r.level() {
                None => "ok".to_owned(),
                Some(Level::Warning) => format!("{} warning(s)", r.finding_count()),
                Some(Level::Error) => "ERROR".to_owned(),
            };
            [number, r.name.clone()]
                .into_iter()
                .chain(columns.iter().map(|c| (c.cell)(r)))
                .chain([status])
                .collect()
        })
        .collect();
    crate::table::aligned(&header, &rows, "")
}

/// `s`, or a dash for a value not known.
pub(super) fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_owned() }
}
