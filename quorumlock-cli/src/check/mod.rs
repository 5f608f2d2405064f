//! `quorumlock check`: is each node fit to take part in a Redlock quorum,
//! or each member of the etcd cluster or server of the ZooKeeper ensemble
//! fit to serve the lock?
//!
//! What is asked differs by store: Redis nodes ([`redis`]: latency,
//! version, role, persistence, clock, permissions and the `--key` states),
//! an etcd cluster ([`etcd`]) or a ZooKeeper ensemble ([`zookeeper`]),
//! with what those two share in [`cluster`]. What is made of the answers
//! is the same for all: a [`Report`] per row with its findings, the
//! findings about the count of rows and the verdict ([`summarize`]), and
//! one table row per node, then each warning or error with the reason it
//! matters for the lock's safety, or all of it as one JSON object
//! ([`output`]).

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod cluster;
#[cfg(feature = "etcd")]
mod etcd;
mod help;
mod output;
mod redis;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::process::ExitCode;
use std::time::Duration;

use crate::duration;
use crate::exit::Exit;
use crate::{Nodes, fail};

/// Options of `quorumlock check`.
#[derive(clap::Args, Debug)]
#[command(after_help = help::text())]
pub(crate) struct Args {
    #[command(flatten)]
    nodes: Nodes,
    /// Time each node has to connect and answer the check's commands.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "2s")]
    timeout: Duration,
    /// The lock ttl you use: clock offsets are compared with its drift allowance.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s")]
    ttl: Duration,
    /// Also report the state of these lock keys on each node (repeat, or comma separated).
    #[arg(long = "key", value_name = "KEY", value_delimiter = ',')]
    keys: Vec<String>,
    /// Print one JSON object (fields in the help's JSON section) instead of the table.
    #[arg(long)]
    json: bool,
    /// Exit with status 1 on warnings too.
    #[arg(long)]
    strict: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Warning,
    Error,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

/// One warning or error, with a stable code for monitoring.
#[derive(Debug)]
struct Finding {
    level: Level,
    code: &'static str,
    message: String,
}

impl Finding {
    fn new(level: Level, code: &'static str, message: impl Into<String>) -> Finding {
        Finding {
            level,
            code,
            message: message.into(),
        }
    }
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
    /// Node clock rate against ours (1.0: the same speed), and its uncertainty.
    rate: Option<(f64, f64)>,
    run_id: String,
    /// Commands the node's user may not run, in the order found.
    missing: Vec<&'static str>,
    keys: Vec<redis::keys::KeyState>,
    findings: Vec<Finding>,
    /// What a Redis Cluster or Sentinel member is made of, as it answered.
    layout: Option<quorumlock::probe::MemberLayout>,
    /// The servers probed for such a member: the cluster's primaries, or
    /// the sentinels' master.
    servers: Vec<Report>,
}

impl Report {
    fn warn(&mut self, code: &'static str, text: impl Into<String>) {
        self.add(Level::Warning, code, text);
    }

    fn error(&mut self, code: &'static str, text: impl Into<String>) {
        self.add(Level::Error, code, text);
    }

    fn add(&mut self, level: Level, code: &'static str, text: impl Into<String>) {
        self.findings.push(Finding::new(level, code, text));
    }

    /// The worst finding about the node, its servers' included.
    fn level(&self) -> Option<Level> {
        let servers = self.servers.iter().filter_map(Report::level);
        self.findings.iter().map(|f| f.level).chain(servers).max()
    }

    /// How many findings there are about the node, its servers' included.
    fn finding_count(&self) -> usize {
        self.findings.len() + self.servers.iter().map(Report::finding_count).sum::<usize>()
    }

    /// The `run_id`s of the servers behind the node.
    fn run_ids(&self) -> impl Iterator<Item = &str> {
        let servers = self.servers.iter().map(|s| s.run_id.as_str());
        std::iter::once(self.run_id.as_str())
            .chain(servers)
            .filter(|id| !id.is_empty())
    }
}

/// The verdict over all nodes.
struct Summary {
    nodes: usize,
    usable: usize,
    majority: usize,
    /// Findings about the set of nodes rather than one of them.
    findings: Vec<Finding>,
    worst: Option<Level>,
    code: u8,
    store: &'static Store,
    /// Members the etcd cluster has beyond those listed.
    unlisted: usize,
}

/// What is checked: Redis nodes for Redlock, an etcd cluster's members, or
/// a ZooKeeper ensemble's servers. The words differ; the table, the
/// findings about the count and the exit statuses are the same.
struct Store {
    /// What they are checked for ("Redlock").
    purpose: &'static str,
    /// What the rows are, in the plural ("nodes").
    unit: &'static str,
    /// One row, in a finding about it and as the heading of its name ("node").
    row: &'static str,
    /// The table's columns after the row's number and name.
    columns: &'static [output::Column],
    /// The code of the warning about an even number of rows ("even_nodes").
    even: &'static str,
    /// The message of the error when fewer than a majority are usable, from
    /// the usable rows, all rows and the majority: each store says what
    /// "usable" means for it and what it stops.
    shortfall: fn(usize, usize, usize) -> String,
}

pub(crate) async fn run(args: Args) -> ExitCode {
    let resolved = args
        .nodes
        .resolve()
        .and_then(|nodes| nodes.require_some().map(|()| nodes));
    let nodes = match resolved {
        Ok(nodes) => nodes,
        Err(message) => return fail(Exit::Usage, message),
    };
    if args.keys.iter().any(String::is_empty) {
        return fail(Exit::Usage, "--key must not be empty");
    }
    // One etcd or ZooKeeper URL is the whole store; without its feature,
    // `resolve` has refused it already.
    match nodes.urls.as_slice() {
        #[cfg(feature = "etcd")]
        [url] if crate::nodes::is_etcd(url) => etcd::run(url, &nodes, &args).await,
        #[cfg(feature = "zookeeper")]
        [url] if crate::nodes::is_zookeeper(url) => zookeeper::run(url, &nodes, &args).await,
        _ => redis::run(&nodes, &args).await,
    }
}

/// The verdict over `reports`, the `findings` about them all, and those
/// about their count that every store has: a warning for an even number,
/// an error when fewer than a majority are usable. `size` is how many rows
/// the store has, at least those listed: the majority is of them all, and
/// those not listed were not asked, so they are not counted against it
/// (a warning about them is the store's to give).
fn summarize(
    reports: &[Report],
    mut findings: Vec<Finding>,
    (size, strict): (usize, bool),
    store: &'static Store,
) -> Summary {
    let majority = quorumlock::probe::majority(size);
    let usable = reports.iter().filter(|r| r.level() != Some(Level::Error)).count();
    let unlisted = size.saturating_sub(reports.len());
    if size.is_multiple_of(2) {
        findings.push(Finding::new(
            Level::Warning,
            store.even,
            format!(
                "{size} {}: an even number needs a majority of {majority}, as {} would, and tolerates no \
                 more failures than {}; use an odd number",
                store.unit,
                size + 1,
                size.saturating_sub(1)
            ),
        ));
    }
    if usable + unlisted < majority {
        let message = (store.shortfall)(usable, size, majority);
        findings.push(Finding::new(Level::Error, "no_majority", message));
    }
    let worst = reports
        .iter()
        .filter_map(Report::level)
        .chain(findings.iter().map(|f| f.level))
        .max();
    let code = match worst {
        Some(Level::Error) => Exit::CheckFailed.code(),
        Some(Level::Warning) if strict => Exit::CheckFailed.code(),
        _ => Exit::Success.code(),
    };
    Summary {
        nodes: reports.len(),
        usable,
        majority,
        findings,
        worst,
        code,
        store,
        unlisted,
    }
}
