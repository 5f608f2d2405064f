//! (e) contended hand-off: 16 waiters take turns on one resource on 3
//! nodes (and, as more setups, on three etcd members and on three ZooKeeper
//! servers), holding it 1 ms each time. A task that released queues again
//! only after someone else acquired, so every hand-off goes to a waiter.
//! The fenced setup takes turns as the plain one on one client does, each
//! acquisition also agreeing on a fencing token.
//!
//! Measured per round: the gap from the holder calling release to the next
//! holder's lock call returning (the time the resource sits idle), hand-offs
//! per second, the Redis commands per hand-off (`INFO commandstats` of the
//! three nodes, before and after the round), and this process's CPU time
//! per hand-off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::consensus::Store;
use crate::contender::{Kind, TTL};
use crate::cpu;
use crate::nodes::Nodes;
use crate::stats;

/// Waiters on the resource.
pub const WAITERS: usize = 16;

/// Nodes.
pub const N: usize = 3;

/// How long each holder keeps the lock.
pub const HOLD: Duration = Duration::from_millis(1);

/// Who waits, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// quorumlock, 16 tasks sharing one client (one process).
    OursShared,
    /// quorumlock, one client per task (16 processes).
    OursPerTask,
    /// quorumlock with fencing tokens (`LockOptions::fenced`), 16 tasks
    /// sharing one client.
    OursFenced,
    /// rslock's `acquire` (polling with its default retry delay), one lock
    /// manager per task.
    Rslock,
    /// quorumlock on a three-member etcd cluster, 16 tasks sharing one
    /// client: `lock` waits in etcd's queue, woken by a watch.
    Etcd,
    /// quorumlock on a three-server ZooKeeper ensemble, 16 tasks sharing
    /// one client: `lock` waits in the lock recipe's queue, woken by a watch.
    ZooKeeper,
}

impl Setup {
    /// The setups on the Redis nodes.
    pub const ALL: [Setup; 4] = [
        Setup::OursShared,
        Setup::OursPerTask,
        Setup::OursFenced,
        Setup::Rslock,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Setup::OursShared => "quorumlock, 16 tasks on one client",
            Setup::OursPerTask => "quorumlock, 16 clients",
            Setup::OursFenced => "quorumlock fenced, 16 tasks on one client",
            Setup::Rslock => "rslock 0.10 (polling), 16 managers",
            Setup::Etcd => "quorumlock on etcd (3 members), 16 tasks on one client",
            Setup::ZooKeeper => "quorumlock on ZooKeeper (3 servers), 16 tasks on one client",
        }
    }

    /// The setup on the consensus store `kind`.
    fn on_store(kind: Kind) -> Setup {
        match kind {
            Kind::Etcd => Setup::Etcd,
            Kind::ZooKeeper => Setup::ZooKeeper,
            _ => panic!("{kind:?} is not a consensus store"),
        }
    }

    /// The consensus store its waiters lock on, if not the Redis nodes.
    pub fn store(self) -> Option<Kind> {
        match self {
            Setup::Etcd => Some(Kind::Etcd),
            Setup::ZooKeeper => Some(Kind::ZooKeeper),
            _ => None,
        }
    }

    /// Whether its waiters talk to the Redis nodes (whose commands a round
    /// counts).
    pub fn on_redis(self) -> bool {
        self.store().is_none()
    }
}

#[derive(Clone)]
enum Waiter {
    Ours(quorumlock::Redlock),
    Rslock(rslock::LockManager),
}

/// One round of one setup.
#[derive(Clone, Debug, Default)]
pub struct Round {
    pub gaps: Vec<Duration>,
    pub handoffs: usize,
    /// First to last acquisition.
    pub span: Duration,
    /// Commands sent by clients (including pub/sub commands) per hand-off,
    /// from the setup's counting round (see [`run`]).
    pub requests_per_handoff: f64,
    /// All commands the nodes executed, including those inside scripts.
    pub commands: u64,
    /// Client CPU time of the round.
    pub cpu: Duration,
    /// Lock calls that failed (and were retried).
    pub errors: usize,
    /// Fewest and most acquisitions of one task.
    pub min_max: (usize, usize),
}

impl Round {
    pub fn gap_p50(&self) -> Option<f64> {
        stats::quantile_us(&self.gaps, 0.5)
    }

    pub fn gap_p99(&self) -> Option<f64> {
        stats::quantile_us(&self.gaps, 0.99)
    }

    pub fn rate(&self) -> f64 {
        self.handoffs as f64 / self.span.as_secs_f64()
    }

    pub fn requests_per_handoff(&self) -> f64 {
        self.requests_per_handoff
    }

    pub fn commands_per_handoff(&self) -> f64 {
        self.commands as f64 / self.handoffs as f64
    }

    pub fn cpu_per_handoff_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.handoffs as f64
    }
}

/// Every setup's rounds, in the order of [`Setup::ALL`], then those of the
/// consensus `stores`.
pub async fn run(
    nodes: &Nodes,
    rounds: usize,
    target: usize,
    warmup: usize,
    stores: &[Store],
) -> Vec<(Setup, Vec<Round>)> {
    let on_stores = stores.iter().map(|s| Setup::on_store(s.kind()));
    let setups: Vec<Setup> = Setup::ALL.into_iter().chain(on_stores).collect();
    let waiters = waiters(nodes, &setups, stores);
    // Connections, subscriptions and script caches first.
    for (i, setup) in setups.iter().enumerate() {
        take_turns(nodes, &waiters[i], &format!("e:warmup:{setup:?}"), warmup).await;
    }
    let mut results: Vec<Vec<Round>> = setups.iter().map(|_| Vec::new()).collect();
    for r in 0..rounds {
        for j in 0..setups.len() {
            let i = (j + r) % setups.len();
            let round = take_turns(nodes, &waiters[i], &format!("e:{:?}:{r}", setups[i]), target).await;
            results[i].push(round);
        }
    }
    // Requests (commands clients sent, not those inside scripts): counted
    // with MONITOR in one more round per setup, which is not timed.
    for (i, setup) in setups.iter().enumerate().filter(|(_, s)| s.on_redis()) {
        let monitor = nodes.monitor(N);
        let counted = take_turns(nodes, &waiters[i], &format!("e:{setup:?}:counted"), target).await;
        let per_handoff = monitor.finish() as f64 / counted.handoffs as f64;
        for round in &mut results[i] {
            round.requests_per_handoff = per_handoff;
        }
    }
    eprintln!("  (e) done");
    setups.into_iter().zip(results).collect()
}

/// The waiters of every setup, in the order of `setups`.
fn waiters(nodes: &Nodes, setups: &[Setup], stores: &[Store]) -> Vec<Vec<Waiter>> {
    let urls = nodes.direct(N);
    let build = || {
        quorumlock::Redlock::builder()
            .nodes(urls.iter().cloned())
            .build()
            .expect("quorumlock config")
    };
    let shared = build();
    let fenced = {
        let redlock = build();
        redlock
            .with_options(redlock.options().fenced(true))
            .expect("fenced options")
    };
    let on_store = |kind: Kind| {
        let store = stores.iter().find(|s| s.kind() == kind);
        store.expect("a store's setup runs with the store").client()
    };
    let mut waiters: Vec<Vec<Waiter>> = Vec::new();
    for setup in setups {
        let ours =
            |client: &quorumlock::Redlock| (0..WAITERS).map(|_| Waiter::Ours(client.clone())).collect();
        waiters.push(match setup {
            Setup::OursShared => ours(&shared),
            Setup::OursPerTask => (0..WAITERS).map(|_| Waiter::Ours(build())).collect(),
            Setup::OursFenced => ours(&fenced),
            Setup::Rslock => (0..WAITERS)
                .map(|_| Waiter::Rslock(rslock::LockManager::new(urls.clone())))
                .collect(),
            Setup::Etcd | Setup::ZooKeeper => ours(&on_store(setup.store().expect("a store"))),
        });
    }
    waiters
}

#[derive(Default)]
struct Turns {
    /// When the last holder started its release.
    release_started: Option<Instant>,
    gaps: Vec<Duration>,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// What the waiters of one round share.
struct Baton {
    turns: Mutex<Turns>,
    /// Acquisitions so far: a waiter that released waits for it to move on.
    acquired: watch::Sender<usize>,
    /// Lock calls that failed (and were retried).
    errors: Mutex<usize>,
}

impl Baton {
    fn new() -> Baton {
        Baton {
            turns: Mutex::default(),
            acquired: watch::channel(0).0,
            errors: Mutex::new(0),
        }
    }

    /// Records an acquisition that just returned (and the gap since the
    /// last release started); returns the acquisitions so far.
    fn acquired_now(&self) -> usize {
        let now = Instant::now();
        let mut t = self.turns.lock().unwrap();
        if let Some(at) = t.release_started.take() {
            t.gaps.push(now - at);
        }
        t.first.get_or_insert(now);
        t.last = Some(now);
        let mut count = 0;
        self.acquired.send_modify(|n| {
            *n += 1;
            count = *n;
        });
        count
    }
}

/// One round: the waiters take turns until `target` acquisitions.
async fn take_turns(nodes: &Nodes, waiters: &[Waiter], resource: &str, target: usize) -> Round {
    let before = nodes.command_calls(N);
    let cpu_before = cpu::this_process();
    let baton = Arc::new(Baton::new());
    let tasks: Vec<_> = waiters
        .iter()
        .cloned()
        .map(|waiter| {
            tokio::spawn(wait_for_turns(
                waiter,
                resource.to_owned(),
                target,
                Arc::clone(&baton),
            ))
        })
        .collect();
    let mut per_task = Vec::new();
    for task in tasks {
        per_task.push(task.await.expect("waiter task"));
    }
    let cpu = cpu::this_process() - cpu_before;
    let after = nodes.command_calls(N);
    let handoffs = (*baton.acquired.borrow()).saturating_sub(1);
    // Every figure of a round is per hand-off: without one there is none to give.
    assert!(
        handoffs > 0,
        "no lock passed from one holder to the next in this round"
    );
    let turns = baton.turns.lock().unwrap();
    Round {
        gaps: turns.gaps.clone(),
        handoffs,
        span: turns.last.zip(turns.first).map_or(Duration::ZERO, |(l, f)| l - f),
        requests_per_handoff: 0.0,
        commands: commands_between(&before, &after),
        cpu,
        errors: *baton.errors.lock().unwrap(),
        min_max: (
            per_task.iter().copied().min().unwrap_or(0),
            per_task.iter().copied().max().unwrap_or(0),
        ),
    }
}

/// One waiter's part of a round: lock (retrying failed calls), hold,
/// release, and queue again only after someone else acquired, until the
/// round has `target` acquisitions. Returns the waiter's acquisitions.
async fn wait_for_turns(waiter: Waiter, resource: String, target: usize, baton: Arc<Baton>) -> usize {
    let mut mine = 0;
    loop {
        let held = loop {
            match acquire(&waiter, &resource).await {
                Ok(held) => break held,
                Err(_) => *baton.errors.lock().unwrap() += 1,
            }
        };
        let count = baton.acquired_now();
        mine += 1;
        tokio::time::sleep(HOLD).await;
        baton.turns.lock().unwrap().release_started = Some(Instant::now());
        release(held).await;
        if count >= target {
            return mine;
        }
        // Queue again only after someone else acquired.
        let mut seen = baton.acquired.subscribe();
        let _ = seen.wait_for(|&n| n != count).await;
        if *seen.borrow() >= target {
            return mine;
        }
    }
}

/// Commands the nodes executed between two `INFO commandstats` readings,
/// those readings' own `INFO` left out.
fn commands_between(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> u64 {
    let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    after
        .keys()
        .filter(|name| *name != "info")
        .map(|name| delta(name))
        .sum()
}

enum Held {
    Ours(quorumlock::Guard),
    Rslock(rslock::LockGuard),
}

async fn acquire(waiter: &Waiter, resource: &str) -> Result<Held, String> {
    match waiter {
        Waiter::Ours(redlock) => redlock
            .lock(resource, TTL)
            .await
            .map(Held::Ours)
            .map_err(|e| e.to_string()),
        Waiter::Rslock(manager) => manager
            .acquire(resource, TTL)
            .await
            .map(Held::Rslock)
            .map_err(|e| e.to_string()),
    }
}

async fn release(held: Held) {
    match held {
        Held::Ours(guard) => {
            let _ = guard.release().await;
        }
        Held::Rslock(guard) => guard.release().await,
    }
}
