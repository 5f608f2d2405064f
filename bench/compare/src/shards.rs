//! (g) quorum members that are Redis Clusters: three members, each a
//! cluster of 1, 2 or 3 primaries (no replicas), against three plain
//! redis-server members in the same rounds. Many tasks cycle lock+unlock as
//! in (b), each cycle on a name of its own, so that the keys spread over
//! the hash slots and so over a member's shards. Besides cycles/s, a round
//! reads every primary's CPU time and its count of commands at the start
//! and end of the counted window.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock_testkit::redis_cluster::RedisCluster;

use crate::contender::{Contender, Kind};
use crate::nodes::Nodes;
use crate::stats;
use crate::throughput::{self, Window};

/// Quorum members, in every configuration.
pub const MEMBERS: usize = 3;

/// Primaries per cluster member.
pub const SHARDS: [usize; 3] = [1, 2, 3];

/// Task counts, as in (b).
pub const TASKS: [usize; 2] = [64, 256];

/// What the members are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    /// Plain redis-server members (the baseline, batching on).
    Plain,
    /// Redis Cluster members of this many primaries (batching off).
    Shards(usize),
}

impl Members {
    /// Every configuration, the baseline first.
    pub fn all() -> impl Iterator<Item = Members> {
        std::iter::once(Members::Plain).chain(SHARDS.into_iter().map(Members::Shards))
    }

    /// Primaries per member.
    pub fn shards(self) -> usize {
        match self {
            Members::Plain => 1,
            Members::Shards(s) => s,
        }
    }

    pub fn label(self) -> String {
        match self {
            Members::Plain => "plain redis-server".into(),
            Members::Shards(1) => "cluster of 1 shard".into(),
            Members::Shards(s) => format!("cluster of {s} shards"),
        }
    }
}

/// One configuration's rounds; every vector has one entry per round.
#[derive(Debug)]
pub struct Config {
    pub members: Members,
    pub tasks: usize,
    /// Cycles per second.
    pub rounds: Vec<f64>,
    /// CPU time per cycle (µs) of the client process.
    pub client_us: Vec<f64>,
    /// CPU time per cycle (µs) of every primary of every member together.
    pub nodes_us: Vec<f64>,
    /// Commands per second of each primary (those run inside scripts
    /// included, as `total_commands_processed` counts them), mean, lowest
    /// and highest over the primaries.
    pub shard_rate: Vec<(f64, f64, f64)>,
    /// Commands per cycle per member.
    pub commands_per_cycle: Vec<f64>,
    /// Cycles counted over all rounds, and failed ones.
    pub cycles: f64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Config {
    fn new(members: Members, tasks: usize) -> Config {
        Config {
            members,
            tasks,
            rounds: Vec::new(),
            client_us: Vec::new(),
            nodes_us: Vec::new(),
            shard_rate: Vec::new(),
            commands_per_cycle: Vec::new(),
            cycles: 0.0,
            errors: 0,
            first_error: None,
        }
    }

    /// Median over rounds of cycles/s.
    pub fn median(&self) -> Option<f64> {
        stats::median(self.rounds.iter().copied())
    }

    /// Node CPU per cycle on the shard that served it, per round: each
    /// cycle's keys share a slot, so on each member one primary serves the
    /// whole cycle.
    pub fn shard_us(&self) -> Vec<f64> {
        self.nodes_us.iter().map(|us| us / MEMBERS as f64).collect()
    }
}

/// A primary whose CPU time and commands a round counts.
struct Primary {
    pid: Option<u32>,
    port: u16,
}

/// The primaries' CPU time at one instant, and their command counts read
/// on a thread of its own: a query blocks, and blocking the client's
/// runtime would hold up its requests past their timeout.
struct Sample {
    cpu: Vec<Duration>,
    commands: std::thread::JoinHandle<Counts>,
}

/// Command counts of the primaries, and the instant they stand for (the
/// middle of the time taken to read them).
struct Counts {
    at: Instant,
    commands: Vec<u64>,
}

fn sample(primaries: &[Primary]) -> Sample {
    let ports: Vec<u16> = primaries.iter().map(|p| p.port).collect();
    Sample {
        cpu: primaries.iter().map(|p| crate::cpu::process(p.pid)).collect(),
        commands: std::thread::spawn(move || {
            let start = Instant::now();
            let commands = ports.into_iter().map(commands_processed).collect();
            Counts {
                at: start + start.elapsed() / 2,
                commands,
            }
        }),
    }
}

/// `total_commands_processed` of the server on `port` (0 when it does not
/// answer, which the errors of the round then show).
fn commands_processed(port: u16) -> u64 {
    let info = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .and_then(|mut conn| redis::cmd("INFO").arg("stats").query::<String>(&mut conn));
    info.ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Starts the clusters of every shard count (in parallel: forming one
/// takes seconds of waiting), `MEMBERS` of each.
fn start_clusters() -> Vec<(usize, Vec<RedisCluster>)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = SHARDS
            .iter()
            .map(|&s| {
                let members: Vec<_> = (0..MEMBERS)
                    .map(|_| scope.spawn(move || RedisCluster::start(s, 0)))
                    .collect();
                (s, members)
            })
            .collect();
        handles
            .into_iter()
            .map(|(s, members)| {
                (
                    s,
                    members.into_iter().map(|h| h.join().expect("cluster")).collect(),
                )
            })
            .collect()
    })
}

/// The URLs and primaries of `members`.
fn setup(
    members: Members,
    nodes: &Nodes,
    clusters: &[(usize, Vec<RedisCluster>)],
) -> (Vec<String>, Vec<Primary>) {
    match members {
        Members::Plain => {
            let servers = &nodes.servers[..MEMBERS];
            let primaries = servers
                .iter()
                .map(|s| Primary {
                    pid: s.pid(),
                    port: s.port(),
                })
                .collect();
            (nodes.direct(MEMBERS), primaries)
        }
        Members::Shards(s) => {
            let (_, group) = clusters.iter().find(|(n, _)| *n == s).expect("clusters started");
            let primaries = group
                .iter()
                .flat_map(|c| {
                    let ports = c.ports();
                    (0..s).map(move |i| Primary {
                        pid: c.pid(i),
                        port: ports[i],
                    })
                })
                .collect();
            (group.iter().map(RedisCluster::url).collect(), primaries)
        }
    }
}

/// Every configuration with every task count, `rounds` times, each round
/// running them all in an order that starts one later each time; the
/// clients with `node_timeout`.
pub async fn run(nodes: &Nodes, rounds: usize, window: Window, node_timeout: Duration) -> Vec<Config> {
    let clusters = start_clusters();
    eprintln!("  (g) clusters formed");
    let mut entries = Vec::new();
    for members in Members::all() {
        for tasks in TASKS {
            let (urls, primaries) = setup(members, nodes, &clusters);
            let contender = Arc::new(Contender::connect_with(Kind::Ours, &urls, node_timeout).await);
            entries.push((contender, primaries, Config::new(members, tasks)));
        }
    }
    for r in 0..rounds {
        for j in 0..entries.len() {
            let i = (j + r) % entries.len();
            let (contender, primaries, config) = &mut entries[i];
            let prefix = format!("g:{:?}:{}:{r}", config.members, config.tasks);
            measure(contender, primaries, config, &prefix, window).await;
        }
    }
    nodes.flush();
    eprintln!("  (g) done");
    entries.into_iter().map(|(_, _, config)| config).collect()
}

/// One round of one configuration, added to `config`.
async fn measure(
    contender: &Arc<Contender>,
    primaries: &[Primary],
    config: &mut Config,
    prefix: &str,
    window: Window,
) {
    // `throughput::round` reads the store's CPU exactly twice, at the start
    // and at the end of the counted window: the command counts are read
    // with it, so that both cover the same window.
    let samples = RefCell::new(Vec::new());
    let store = || {
        let s = sample(primaries);
        let cpu = s.cpu.iter().sum();
        samples.borrow_mut().push(s);
        cpu
    };
    let outcome = throughput::round(&store, contender, config.tasks, prefix, window).await;
    let counts: Vec<Counts> = samples
        .into_inner()
        .into_iter()
        .map(|s| s.commands.join().expect("command counts"))
        .collect();
    let [before, after] = &counts[..] else {
        panic!("a round samples the store at the start and the end of its window");
    };
    let secs = (after.at - before.at).as_secs_f64();
    let rates: Vec<f64> = before
        .commands
        .iter()
        .zip(&after.commands)
        .map(|(b, a)| a.saturating_sub(*b) as f64 / secs)
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let (low, high) = rates
        .iter()
        .fold((f64::INFINITY, 0.0_f64), |(l, h), &r| (l.min(r), h.max(r)));
    let cycles = outcome.rate * secs;
    config.rounds.push(outcome.rate);
    config.client_us.push(outcome.client_us);
    config.nodes_us.push(outcome.server_us);
    config.shard_rate.push((mean, low, high));
    config
        .commands_per_cycle
        .push(rates.iter().sum::<f64>() * secs / (MEMBERS as f64 * cycles));
    config.cycles += cycles;
    config.errors += outcome.errors;
    if config.first_error.is_none() {
        config.first_error = outcome.first_error;
    }
}
