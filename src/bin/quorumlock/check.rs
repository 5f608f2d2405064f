//! `quorumlock check`: is each node fit to take part in a Redlock quorum?
//!
//! Asks every node at once for its latency, version, role, persistence and
//! clock, prints one table row per node, then each warning or error with the
//! reason it matters for the lock's safety.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};
use tokio::time::{Instant, timeout};

use crate::duration::{self, show};
use crate::nodes::Resolved;
use crate::{Nodes, exit, fail};

const CHECK_HELP: &str = "\
Examples:
  quorumlock check --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 quorumlock check --strict

Exit status: 0 when every node is usable (warnings allowed unless --strict),
1 when a node is unreachable, a replica that refuses writes, or listed twice.";

/// Options of `quorumlock check`.
#[derive(clap::Args, Debug)]
#[command(after_help = CHECK_HELP)]
pub(crate) struct Args {
    #[command(flatten)]
    nodes: Nodes,
    /// Time each node has to connect and answer the check's commands.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "2s")]
    timeout: Duration,
    /// The lock ttl you use: clock offsets are compared with its drift allowance.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s")]
    ttl: Duration,
    /// Exit with status 1 on warnings too.
    #[arg(long)]
    strict: bool,
}

/// Samples taken of PING and TIME; the fastest round trip is kept.
const SAMPLES: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Warning,
    Error,
}

/// What was learnt about one node.
#[derive(Debug, Default)]
struct Report {
    name: String,
    ping: Option<Duration>,
    version: String,
    role: String,
    appendonly: String,
    appendfsync: String,
    /// Node clock minus ours, in milliseconds, and its uncertainty (half the round trip).
    offset: Option<(f64, f64)>,
    run_id: String,
    problems: Vec<(Level, String)>,
}

impl Report {
    fn warn(&mut self, text: impl Into<String>) {
        self.problems.push((Level::Warning, text.into()));
    }

    fn error(&mut self, text: impl Into<String>) {
        self.problems.push((Level::Error, text.into()));
    }

    fn level(&self) -> Option<Level> {
        self.problems.iter().map(|(level, _)| *level).max()
    }
}

pub(crate) async fn run(args: Args) -> ExitCode {
    let nodes = match args
        .nodes
        .resolve()
        .and_then(|nodes| nodes.require_some().map(|()| nodes))
    {
        Ok(nodes) => nodes,
        Err(message) => return fail(exit::USAGE, message),
    };
    let drift = args.ttl.mul_f64(quorumlock::DEFAULT_DRIFT_FACTOR) + quorumlock::DEFAULT_DRIFT_FIXED;
    let probes = nodes.urls.iter().map(|url| probe(url, &nodes, &args, drift));
    let mut reports = futures::future::join_all(probes).await;
    for i in 0..reports.len() {
        let earlier =
            (0..i).find(|&j| !reports[i].run_id.is_empty() && reports[j].run_id == reports[i].run_id);
        if let Some(j) = earlier {
            reports[i].error(format!(
                "same server as node {} (run_id): listed twice, it would count twice towards the majority",
                j + 1
            ));
        }
    }
    print!("{}", table(&reports));
    let n = reports.len();
    let quorum = n / 2 + 1;
    let usable = reports.iter().filter(|r| r.level() != Some(Level::Error)).count();
    let mut notes = Vec::new();
    if n % 2 == 0 {
        notes.push((
            Level::Warning,
            format!(
                "{n} nodes: an even number needs a majority of {quorum}, as {} would, and tolerates no more \
                 failures than {}; use an odd number",
                n + 1,
                n - 1
            ),
        ));
    }
    if usable < quorum {
        notes.push((
            Level::Error,
            format!(
                "only {usable} of {n} nodes are usable and a majority needs {quorum}: no lock can be taken"
            ),
        ));
    }
    let mut worst = None;
    for (i, report) in reports.iter().enumerate() {
        for (level, text) in &report.problems {
            println!("node {} ({}): {}: {text}", i + 1, report.name, label(*level));
            worst = worst.max(Some(*level));
        }
    }
    for (level, text) in &notes {
        println!("{}: {text}", label(*level));
        worst = worst.max(Some(*level));
    }
    let summary = format!("{usable} of {n} nodes usable, majority {quorum}");
    match worst {
        None => println!("all nodes fit for Redlock ({summary})"),
        Some(Level::Warning) => println!("usable with warnings ({summary})"),
        Some(Level::Error) => println!("not usable as configured ({summary})"),
    }
    match worst {
        Some(Level::Error) => ExitCode::from(exit::CHECK_FAILED),
        Some(Level::Warning) if args.strict => ExitCode::from(exit::CHECK_FAILED),
        _ => ExitCode::SUCCESS,
    }
}

fn label(level: Level) -> &'static str {
    match level {
        Level::Warning => "warning",
        Level::Error => "ERROR",
    }
}

/// Connects to one node and fills a report; never fails, problems go into it.
async fn probe(url: &str, nodes: &Resolved, args: &Args, drift: Duration) -> Report {
    let mut report = Report {
        name: quorumlock::redact_url(url),
        ..Report::default()
    };
    let client = match nodes.client(url) {
        Ok(client) => client,
        Err(e) => {
            report.error(e);
            return report;
        }
    };
    let info = client.get_connection_info();
    report.name = format!("{}/{}", info.addr(), info.redis_settings().db());
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(args.timeout))
        .set_response_timeout(Some(args.timeout));
    let mut conn = match client.get_multiplexed_async_connection_with_config(&config).await {
        Ok(conn) => conn,
        Err(e) => {
            report.error(format!("unreachable: {e}"));
            return report;
        }
    };
    if let Err(e) = inspect(&mut conn, &mut report, args, drift).await {
        report.error(format!("unusable: {e}"));
    }
    report
}

async fn inspect(
    conn: &mut MultiplexedConnection,
    report: &mut Report,
    args: &Args,
    drift: Duration,
) -> redis::RedisResult<()> {
    let mut best = Duration::MAX;
    for _ in 0..SAMPLES {
        let start = Instant::now();
        let _: String = query(conn, args.timeout, redis::cmd("PING")).await?;
        best = best.min(start.elapsed());
    }
    report.ping = Some(best);
    if best > args.nodes.node_timeout {
        report.warn(format!(
            "PING takes {}, more than the node timeout {}: lock requests to this node will time out \
             (raise --node-timeout / RedlockBuilder::node_timeout, and the ttl with it)",
            show(best),
            show(args.nodes.node_timeout)
        ));
    }
    let server = info(conn, args.timeout, "server").await?;
    report.version = server.get("redis_version").cloned().unwrap_or_default();
    report.run_id = server.get("run_id").cloned().unwrap_or_default();
    let replication = info(conn, args.timeout, "replication").await?;
    report.role = replication.get("role").cloned().unwrap_or_default();

    let mut settings = HashMap::new();
    for name in [
        "appendonly",
        "appendfsync",
        "maxmemory",
        "maxmemory-policy",
        "replica-read-only",
    ] {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        match query::<Vec<String>>(conn, args.timeout, cmd).await {
            Ok(pair) if pair.len() == 2 => {
                settings.insert(name, pair[1].clone());
            }
            Ok(_) => {}
            Err(e) => {
                report.warn(format!(
                    "CONFIG GET is not allowed ({e}): persistence and eviction settings are unknown, check them yourself"
                ));
                let persistence = info(conn, args.timeout, "persistence").await?;
                if let Some(aof) = persistence.get("aof_enabled") {
                    settings.insert("appendonly", if aof == "1" { "yes" } else { "no" }.into());
                }
                break;
            }
        }
    }
    let setting = |name: &str| settings.get(name).cloned().unwrap_or_default();
    report.appendonly = setting("appendonly");
    report.appendfsync = setting("appendfsync");
    judge(report, &replication, &setting);

    // Clock: node time minus ours at the middle of the fastest round trip.
    let mut best: Option<(Duration, f64)> = None;
    for _ in 0..SAMPLES {
        let sent = SystemTime::now();
        let start = Instant::now();
        let reply: Vec<String> = query(conn, args.timeout, redis::cmd("TIME")).await?;
        let rtt = start.elapsed();
        let node_us = match reply.as_slice() {
            [secs, micros] => secs.parse::<f64>().unwrap_or(0.0) * 1e6 + micros.parse::<f64>().unwrap_or(0.0),
            _ => continue,
        };
        let ours_us = (sent + rtt / 2)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
            * 1e6;
        if best.is_none_or(|(b, _)| rtt < b) {
            best = Some((rtt, (node_us - ours_us) / 1000.0));
        }
    }
    if let Some((rtt, offset_ms)) = best {
        let uncertainty = rtt.as_secs_f64() * 500.0;
        // No "-0.0" in the table.
        let offset_ms = if offset_ms.abs() < 0.05 { 0.0 } else { offset_ms };
        report.offset = Some((offset_ms, uncertainty));
        let allowance = drift.as_secs_f64() * 1000.0;
        if offset_ms.abs() - uncertainty > allowance {
            report.warn(format!(
                "clock differs from this host's by {offset_ms:+.0} ms, more than the drift allowance of \
                 {allowance:.0} ms for a {} ttl: one of the clocks is not synchronised, and if it is stepped \
                 into sync (not slewed), locks on this node expire that much early or late; run NTP (chrony) \
                 on every node and client",
                show(args.ttl)
            ));
        }
    }
    Ok(())
}

/// Warnings and errors from the node's role and settings.
fn judge(report: &mut Report, replication: &HashMap<String, String>, setting: &dyn Fn(&str) -> String) {
    let role = report.role.clone();
    if role == "slave" || role == "replica" {
        let master = format!(
            "{}:{}",
            replication.get("master_host").map_or("?", String::as_str),
            replication.get("master_port").map_or("?", String::as_str)
        );
        if setting("replica-read-only") == "no" {
            report.warn(format!(
                "replica of {master}: locks written here are not replicated and vanish when it resyncs; \
                 use independent masters"
            ));
        } else {
            report.error(format!(
                "replica of {master}: it refuses lock writes (READONLY); Redlock needs independent masters"
            ));
        }
    } else if let Some(n) = replication.get("connected_slaves").filter(|n| *n != "0") {
        report.warn(format!(
            "master with {n} replica(s): a failover to a replica loses the locks not yet replicated, like a \
             restart without persistence; prefer independent masters without failover"
        ));
    }
    match (report.appendonly.as_str(), report.appendfsync.as_str()) {
        ("no", _) => report.warn(
            "no persistence (appendonly no): after a restart the node has forgotten its locks and can grant \
             a held one again; use appendonly yes + appendfsync always, or restart it only after the \
             longest ttl has passed (delayed restart)",
        ),
        ("yes", "everysec") => report.warn(
            "appendfsync everysec: a crash can lose the last second of writes, locks granted in it \
             included; use appendfsync always, or delayed restarts",
        ),
        ("yes", "no") => report.warn(
            "appendfsync no: the OS decides when the AOF reaches disk, so a crash can lose many recent \
             locks; use appendfsync always, or delayed restarts",
        ),
        _ => {}
    }
    let policy = setting("maxmemory-policy");
    let limited = setting("maxmemory").parse::<u64>().is_ok_and(|m| m > 0);
    if limited && !policy.is_empty() && policy != "noeviction" {
        report.warn(format!(
            "maxmemory-policy {policy}: under memory pressure Redis may evict lock keys (they all have a \
             ttl) and grant them again; use noeviction"
        ));
    }
}

async fn query<T: FromRedisValue>(
    conn: &mut MultiplexedConnection,
    limit: Duration,
    cmd: redis::Cmd,
) -> redis::RedisResult<T> {
    match timeout(limit, cmd.query_async(conn)).await {
        Ok(result) => result,
        Err(_) => Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no reply in time",
            format!("{limit:?}"),
        ))),
    }
}

/// `INFO section` as a map of its `key:value` lines.
async fn info(
    conn: &mut MultiplexedConnection,
    limit: Duration,
    section: &str,
) -> redis::RedisResult<HashMap<String, String>> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg(section);
    let text: String = query(conn, limit, cmd).await?;
    Ok(text
        .lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// The table of all nodes, one row each.
fn table(reports: &[Report]) -> String {
    let header = [
        "#",
        "node",
        "ping",
        "version",
        "role",
        "appendonly",
        "appendfsync",
        "clock offset",
        "status",
    ];
    let rows: Vec<Vec<String>> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let status = match r.level() {
                None => "ok".to_owned(),
                Some(Level::Warning) => format!("{} warning(s)", r.problems.len()),
                Some(Level::Error) => "ERROR".to_owned(),
            };
            vec![
                (i + 1).to_string(),
                r.name.clone(),
                r.ping
                    .map_or("-".into(), |p| format!("{:.2} ms", p.as_secs_f64() * 1000.0)),
                dash(&r.version),
                dash(&r.role),
                dash(&r.appendonly),
                dash(&r.appendfsync),
                r.offset
                    .map_or("-".into(), |(ms, err)| format!("{ms:+.1} ms ±{err:.1}")),
                status,
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", padded.join("  ").trim_end());
    };
    line(&mut out, &header);
    for row in &rows {
        line(&mut out, &row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

fn dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_owned() }
}
