//! One node: its latency, version, role, persistence and clock, then its
//! permissions ([`super::access`]) and the `--key` states ([`super::keys`]).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::probe::{self as cli_probe, CONFIG_GET, INFO, PING, TIME};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, Value};
use tokio::time::Instant;

use super::command::query;
use super::shard::{self, Shard};
use super::{access, keys};
use crate::check::{Args, Report};
use crate::duration::show;
use crate::nodes::Resolved;

/// Samples taken of PING and TIME; the fastest round trip is kept.
const SAMPLES: usize = 5;

/// Connects to one server and fills a report; never fails, problems go
/// into it. `shard` says which cluster the server is a primary of, if any.
pub(super) async fn probe(
    url: &str,
    nodes: &Resolved,
    args: &Args,
    drift: Duration,
    shard: Option<&Shard<'_>>,
) -> Report {
    let mut report = Report {
        name: quorumlock::redact_url(url),
        ..Report::default()
    };
    let client = match nodes.client(url) {
        Ok(client) => client,
        Err(e) => {
            report.error("bad_url", e);
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
        Err(e) if e.kind() == ErrorKind::AuthenticationFailed => {
            report.error("auth_failed", format!("authentication failed: {e}"));
            return report;
        }
        Err(e) => {
            report.error("unreachable", format!("unreachable: {e}"));
            return report;
        }
    };
    let inspected = inspect(&mut conn, &mut report, args, drift).await;
    let result = match inspected {
        Ok(Writes::Refused) => Ok(()),
        Ok(Writes::Accepted) => access::probe(&mut conn, &client, (args.timeout, shard), &mut report).await,
        Err(e) => Err(e),
    };
    let result = match result {
        Ok(()) => {
            let keys: Vec<String> = args
                .keys
                .iter()
                .filter(|key| shard::holds(shard, key))
                .cloned()
                .collect();
            keys::inspect(&mut conn, args.timeout, &keys, &mut report).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        report.error("unusable", format!("unusable: {e}"));
    }
    report
}

/// Whether the node takes writes, so that its permissions can be tried.
enum Writes {
    Accepted,
    /// A read-only replica: already an error, and every write would fail.
    Refused,
}

async fn inspect(
    conn: &mut MultiplexedConnection,
    report: &mut Report,
    args: &Args,
    drift: Duration,
) -> redis::RedisResult<Writes> {
    latency(conn, report, args).await?;
    let server = info(conn, args.timeout, "server", report).await?;
    report.version = server.get("redis_version").cloned().unwrap_or_default();
    report.run_id = server.get("run_id").cloned().unwrap_or_default();
    let replication = info(conn, args.timeout, "replication", report).await?;
    report.role = replication.get("role").cloned().unwrap_or_default();

    let mut settings = HashMap::new();
    for name in [
        "appendonly",
        "appendfsync",
        "maxmemory",
        "maxmemory-policy",
        "replica-read-only",
    ] {
        let mut cmd = CONFIG_GET.cmd();
        cmd.arg(name);
        match query::<Vec<String>>(conn, args.timeout, cmd).await {
            Ok(pair) if pair.len() == 2 => {
                settings.insert(name, pair[1].clone());
            }
            Ok(_) => {}
            Err(e) => {
                if access::is_denied(&e) {
                    access::deny(report, &CONFIG_GET, &e.to_string());
                } else {
                    let name = CONFIG_GET.name;
                    report.warn(
                        "config_unavailable",
                        format!(
                            "{name} is not available ({e}): persistence and eviction settings are \
                             unknown, check them yourself"
                        ),
                    );
                }
                let persistence = info(conn, args.timeout, "persistence", report).await?;
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
    let writes = judge(report, &replication, &setting);
    clock(conn, report, args, drift).await?;
    if report.offset.is_some() {
        rate(conn, report, args).await?;
    }
    Ok(writes)
}

/// The fastest PING round trip, compared with the node timeout.
async fn latency(
    conn: &mut MultiplexedConnection,
    report: &mut Report,
    args: &Args,
) -> redis::RedisResult<()> {
    let mut best = Duration::MAX;
    for _ in 0..SAMPLES {
        let start = Instant::now();
        match query::<String>(conn, args.timeout, PING.cmd()).await {
            Ok(_) => best = best.min(start.elapsed()),
            Err(e) if access::is_denied(&e) => {
                access::deny(report, &PING, &e.to_string());
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
    report.ping = Some(best);
    if best > args.nodes.node_timeout {
        report.warn(
            "slow",
            format!(
                "{} takes {}, more than the node timeout {}: lock requests to this node will time out \
                 (raise --node-timeout / RedlockBuilder::node_timeout, and the ttl with it)",
                PING.name,
                show(best),
                show(args.nodes.node_timeout)
            ),
        );
    }
    Ok(())
}

/// How far apart the two readings of a node's clock are that give its
/// rate: with loopback or LAN round trips (well under a millisecond) the
/// rate comes out to within 0.2 %, a fifth of the 1 % drift allowance, and
/// a check of all nodes (they are checked at once) takes that much longer.
const RATE_SPAN: Duration = Duration::from_millis(500);

/// One reading of the node's clock: microseconds since the epoch, with our
/// monotonic clock at the midpoint of its round trip and that round trip.
async fn read_time(
    conn: &mut MultiplexedConnection,
    args: &Args,
) -> redis::RedisResult<Option<(f64, Instant, Duration)>> {
    let start = Instant::now();
    let reply: Value = query(conn, args.timeout, cli_probe::time()).await?;
    let rtt = start.elapsed();
    // A reply of another shape leaves the rate unknown.
    let node_us = cli_probe::parse_time(reply).ok();
    Ok(node_us.map(|us| (us as f64, start + rtt / 2, rtt)))
}

/// The node's clock rate against ours: two readings [`RATE_SPAN`] apart,
/// with the error their round trips leave, and a warning when the node's
/// clock runs faster than the drift allowance covers (its keys expire
/// early; the library then shortens the validity of locks it grants).
async fn rate(conn: &mut MultiplexedConnection, report: &mut Report, args: &Args) -> redis::RedisResult<()> {
    let Some((node_a, at_a, rtt_a)) = read_time(conn, args).await? else {
        return Ok(());
    };
    tokio::time::sleep(RATE_SPAN).await;
    let Some((node_b, at_b, rtt_b)) = read_time(conn, args).await? else {
        return Ok(());
    };
    let ours = at_b.duration_since(at_a).as_secs_f64() * 1e6;
    let rate = (node_b - node_a) / ours;
    let error = (rtt_a + rtt_b).as_secs_f64() * 1e6 / 2.0 / ours;
    report.rate = Some((rate, error));
    if rate - error > 1.0 + quorumlock::DEFAULT_DRIFT_FACTOR {
        report.warn(
            "clock_rate",
            format!(
                "clock runs {rate:.3} times as fast as this host's (±{error:.3}), beyond the drift \
                 allowance of {:.0} %: keys there expire early; a client trusts locks it grants for \
                 correspondingly less, and at worst not at all. Fix the node's time keeping",
                quorumlock::DEFAULT_DRIFT_FACTOR * 100.0
            ),
        );
    }
    Ok(())
}

/// The node's clock minus ours at the middle of the fastest round trip.
async fn clock(
    conn: &mut MultiplexedConnection,
    report: &mut Report,
    args: &Args,
    drift: Duration,
) -> redis::RedisResult<()> {
    let mut best: Option<(Duration, f64)> = None;
    for _ in 0..SAMPLES {
        let sent = SystemTime::now();
        let start = Instant::now();
        let reply: Value = match query(conn, args.timeout, cli_probe::time()).await {
            Ok(reply) => reply,
            Err(e) if access::is_denied(&e) => {
                access::deny(report, &TIME, &e.to_string());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let rtt = start.elapsed();
        let Ok(node_us) = cli_probe::parse_time(reply) else {
            continue;
        };
        let node_us = node_us as f64;
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
            report.warn(
                "clock_offset",
                format!(
                    "clock differs from this host's by {offset_ms:+.0} ms, more than the drift allowance of \
                     {allowance:.0} ms for a {} ttl: one of the clocks is not synchronised, and if it is \
                     stepped into sync (not slewed), locks on this node expire that much early or late; run \
                     NTP (chrony) on every node and client",
                    show(args.ttl)
                ),
            );
        }
    }
    Ok(())
}

/// Warnings and errors from the node's role and settings.
fn judge(
    report: &mut Report,
    replication: &HashMap<String, String>,
    setting: &dyn Fn(&str) -> String,
) -> Writes {
    let role = report.role.clone();
    let mut writes = Writes::Accepted;
    if role == "slave" || role == "replica" {
        let master = format!(
            "{}:{}",
            replication.get("master_host").map_or("?", String::as_str),
            replication.get("master_port").map_or("?", String::as_str)
        );
        if setting("replica-read-only") == "no" {
            report.warn(
                "replica_writable",
                format!(
                    "replica of {master}: locks written here are not replicated and vanish when it resyncs; \
                     use independent masters"
                ),
            );
        } else {
            report.error(
                "replica",
                format!("replica of {master}: it refuses lock writes (READONLY); Redlock needs independent masters"),
            );
            writes = Writes::Refused;
        }
    } else if let Some(n) = replication.get("connected_slaves").filter(|n| *n != "0") {
        report.warn(
            "replicated_master",
            format!(
                "master with {n} replica(s): a failover to a replica loses the locks not yet replicated, like \
                 a restart without persistence; prefer independent masters without failover"
            ),
        );
    }
    match (report.appendonly.as_str(), report.appendfsync.as_str()) {
        ("no", _) => report.warn(
            "no_persistence",
            "no persistence (appendonly no): after a restart the node has forgotten its locks and can grant \
             a held one again; use appendonly yes + appendfsync always, or restart it only after the \
             longest ttl has passed (delayed restart)",
        ),
        ("yes", "everysec") => report.warn(
            "fsync_everysec",
            "appendfsync everysec: a crash can lose the last second of writes, locks granted in it \
             included; use appendfsync always, or delayed restarts",
        ),
        ("yes", "no") => report.warn(
            "fsync_no",
            "appendfsync no: the OS decides when the AOF reaches disk, so a crash can lose many recent \
             locks; use appendfsync always, or delayed restarts",
        ),
        _ => {}
    }
    let policy = setting("maxmemory-policy");
    let limited = setting("maxmemory").parse::<u64>().is_ok_and(|m| m > 0);
    if limited && !policy.is_empty() && policy != "noeviction" {
        report.warn(
            "eviction",
            format!(
                "maxmemory-policy {policy}: under memory pressure Redis may evict lock keys (they all have a \
                 ttl) and grant them again; use noeviction"
            ),
        );
    }
    writes
}

/// `INFO section` as a map of its `key:value` lines; empty when the user
/// may not run INFO (which is then reported).
async fn info(
    conn: &mut MultiplexedConnection,
    limit: Duration,
    section: &str,
    report: &mut Report,
) -> redis::RedisResult<HashMap<String, String>> {
    let mut cmd = INFO.cmd();
    cmd.arg(section);
    let text: String = match query(conn, limit, cmd).await {
        Ok(text) => text,
        Err(e) if access::is_denied(&e) => {
            access::deny(report, &INFO, &e.to_string());
            return Ok(HashMap::new());
        }
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}
