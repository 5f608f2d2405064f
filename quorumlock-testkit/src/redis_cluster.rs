//! Local Redis Clusters for tests: `redis-server --cluster-enabled yes`
//! nodes on free loopback ports (each with its own directory and
//! `nodes.conf`), formed with `redis-cli --cluster create` (by hand with
//! `CLUSTER` commands below three primaries, which it refuses), killed and
//! reaped when dropped. Like [`crate::server`], everything here blocks (std
//! only, no runtime).
//!
//! Node indexes are fixed once the cluster has formed: `0..primaries` are
//! the first primaries (by slot range), the rest their replicas, in the
//! order of their primaries. Roles change on a failover; indexes do not.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::members::poll;
use crate::pause::Paused;
use crate::redis_proc::{COMMAND_TIMEOUT, Proc, query_within};

mod by_hand;
mod parts;

use parts::{admin, redis_cli};

/// The number of hash slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;

/// `cluster-node-timeout` in milliseconds: how long a node may not answer
/// before the others flag it failing. Redis's default (15 s) is tuned for
/// real networks; with this, a replica takes over about a second after its
/// primary died (timeout, then a randomized election delay).
const NODE_TIMEOUT_MS: u32 = 500;

/// A node's cluster bus port is its client port plus this (Redis's fixed
/// offset); both must be free.
const BUS_PORT_OFFSET: u16 = 10000;

/// How long a cluster may take to form, and to serve every slot again
/// after a restart or a slot migration. Generous: `redis-cli --cluster
/// create` alone polls once a second until the nodes have met.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a replica may take to be promoted after its primary was
/// killed: a few node timeouts plus the election delays (up to a second
/// per replica rank), with room for a loaded CI machine.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(15);

/// How many keys one `MIGRATE` moves in [`RedisCluster::migrate_slot`].
const MIGRATE_BATCH: usize = 100;

/// How many fresh sets of ports to try when another process takes one of
/// ours between finding it free and a node binding it.
const PORT_ATTEMPTS: usize = 5;

/// A slot on its way from one primary to another (see
/// [`RedisCluster::begin_migration`]).
#[derive(Debug)]
pub struct Migration {
    /// The slot.
    pub slot: u16,
    /// The node indexes of its old and new primary.
    pub from: usize,
    /// See `from`.
    pub to: usize,
}

/// A Redis Cluster of `redis-server` processes on 127.0.0.1.
#[derive(Debug)]
pub struct RedisCluster {
    dir: PathBuf,
    primaries: usize,
    nodes: Vec<Proc>,
}

// No `is_empty`: a cluster always has nodes.
#[allow(clippy::len_without_is_empty)]
impl RedisCluster {
    /// Starts `primaries` primaries (at least one) with
    /// `replicas_per_primary` replicas each, forms the cluster and waits
    /// until every node serves all 16384 slots; panics with the logs when
    /// it cannot. One primary serves every slot.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> RedisCluster {
        assert!(primaries >= 1, "a cluster needs a primary");
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(primaries, replicas_per_primary) {
                Ok(cluster) => return cluster,
                // Someone took one of the ports in the meantime: try others.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
                Err(e) => panic!("redis cluster: {e}"),
            }
        }
        panic!("{}", last_error.expect("at least one attempt"));
    }

    /// The number of nodes, running or not.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The client port of each node (kept across restarts).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis://127.0.0.1:P` of each of the first primaries (nodes
    /// `0..primaries`), whatever their role now: seeds from which a cluster
    /// client learns the rest.
    pub fn seed_urls(&self) -> Vec<String> {
        self.seeds().iter().map(|s| format!("redis://{s}")).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`: the seeds of
    /// [`RedisCluster::seed_urls`] in one URL.
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", self.seeds().join(","))
    }

    /// The index of the running node that every answering node names as
    /// the primary serving `slot`, waiting (polling) while they disagree,
    /// e.g. during a failover; panics with the logs when they never agree.
    pub fn primary_for_slot(&self, slot: u16) -> usize {
        poll(FAILOVER_TIMEOUT, || self.agreed_owner(slot)).unwrap_or_else(|| {
            panic!(
                "the nodes never agreed on a running primary for slot {slot}\n{}",
                self.logs()
            )
        })
    }

    /// The hash slot of `key` (asked of a running node).
    pub fn slot_of(&self, key: &str) -> u16 {
        let port = self.any_running_port();
        query_within(port, COMMAND_TIMEOUT, &["CLUSTER", "KEYSLOT", key])
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT {key}: {e}"))
    }

    /// SIGKILLs node `i` and reaps it (a crash); its directory and
    /// `nodes.conf` stay, and its ports are held until a restart.
    /// Idempotent.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Kills node `i` if it runs, starts it again on the same ports and
    /// directory (it rejoins from its `nodes.conf`, without data: a former
    /// primary whose replica took over comes back as that one's replica),
    /// and waits until the cluster is healthy ([`RedisCluster::wait_healthy`]).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.nodes[i]
            .spawn()
            .unwrap_or_else(|e| panic!("cluster node {i}: {e}"));
        self.wait_healthy();
    }

    /// Freezes node `i` with SIGSTOP until the returned guard is dropped
    /// (SIGCONT). While frozen, connects succeed but requests hang, and
    /// after the node timeout the others flag it failing.
    pub fn pause(&self, i: usize) -> Paused {
        let pid = self.nodes[i].pid();
        Paused::stop(pid.unwrap_or_else(|| panic!("pause: cluster node {i} is not running")))
    }

    /// Whether node `i` has been started and not killed (a paused node is
    /// running).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].is_running()
    }

    /// Node `i`'s process id, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].pid()
    }

    /// Sends `args` to node `i` alone (no redirections followed) and
    /// returns its reply as text (`INFO`, `CLUSTER NODES`).
    pub fn command(&self, i: usize, args: &[&str]) -> io::Result<String> {
        query_within(self.nodes[i].port, COMMAND_TIMEOUT, args).map_err(io::Error::other)
    }

    /// Node `i`'s log so far (across restarts).
    pub fn log(&self, i: usize) -> String {
        self.nodes[i].log()
    }

    /// Waits (polling) until every running node answers, reports
    /// `cluster_state:ok` with all 16384 slots assigned and ok, sees every
    /// running node and flags none of them failing, all agree which running
    /// primary serves which slots, and every running replica's link to its
    /// primary is up; panics with the reason and the logs when that does
    /// not happen in time (a paused node never counts as healthy).
    pub fn wait_healthy(&self) {
        let mut why = String::new();
        let healthy = poll(HEALTHY_TIMEOUT, || match self.health() {
            Ok(()) => Some(()),
            Err(reason) => {
                why = reason;
                None
            }
        });
        if healthy.is_none() {
            panic!(
                "redis cluster not healthy after {HEALTHY_TIMEOUT:?}: {why}\n{}",
                self.logs()
            );
        }
    }

    /// Kills the primary serving `slot` and waits until one of its replicas
    /// has been promoted and the cluster is healthy again with the slot
    /// served by the new primary, whose index it returns; panics with the
    /// logs when that does not happen in time.
    pub fn failover_primary_of(&mut self, slot: u16) -> usize {
        let old = self.primary_for_slot(slot);
        self.kill(old);
        let mut why = String::new();
        let promoted = poll(FAILOVER_TIMEOUT, || {
            let owner = self.agreed_owner(slot).filter(|&owner| owner != old);
            match (owner, self.health()) {
                (Some(owner), Ok(())) => Some(owner),
                (_, Err(reason)) => {
                    why = reason;
                    None
                }
                (None, Ok(())) => None,
            }
        });
        promoted.unwrap_or_else(|| {
            panic!(
                "no replica of node {old} took over slot {slot} in {FAILOVER_TIMEOUT:?}: {why}\n{}",
                self.logs()
            )
        })
    }

    /// Moves `slot` with its keys to primary `to` (`CLUSTER SETSLOT`
    /// IMPORTING and MIGRATING, `MIGRATE` in batches, `SETSLOT NODE` on
    /// both sides and every other primary), then waits until every node
    /// agrees that `to` serves it. Nothing to do when `to` serves it
    /// already; panics when `to` is not a running primary or a step fails.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        if let Some(migration) = self.begin_migration(slot, to) {
            self.finish_migration(migration);
        }
    }

    /// The first half of [`RedisCluster::migrate_slot`]: marks `slot`
    /// IMPORTING on `to` and MIGRATING on its primary, and returns, the
    /// slot's keys still on the old primary. Until
    /// [`RedisCluster::finish_migration`], the old primary serves the keys
    /// it still has and answers `ASK` for the others, as during a
    /// `redis-cli --cluster reshard`. `None` when `to` serves it already.
    pub fn begin_migration(&self, slot: u16, to: usize) -> Option<Migration> {
        let from = self.primary_for_slot(slot);
        if from == to {
            return None;
        }
        let slot_arg = slot.to_string();
        admin(
            self.nodes[to].port,
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &self.node_id(from)],
        );
        admin(
            self.nodes[from].port,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &self.node_id(to)],
        );
        Some(Migration { slot, from, to })
    }

    /// The second half of [`RedisCluster::migrate_slot`]: moves the keys
    /// the old primary still has and hands the slot over everywhere.
    pub fn finish_migration(&self, migration: Migration) {
        let Migration { slot, from, to } = migration;
        let (from_port, to_port) = (self.nodes[from].port, self.nodes[to].port);
        let to_id = self.node_id(to);
        let slot_arg = slot.to_string();
        let batch = MIGRATE_BATCH.to_string();
        loop {
            let keys: Vec<String> = query_within(
                from_port,
                COMMAND_TIMEOUT,
                &["CLUSTER", "GETKEYSINSLOT", &slot_arg, &batch],
            )
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {slot} on node {from}: {e}"));
            if keys.is_empty() {
                break;
            }
            let timeout_ms = COMMAND_TIMEOUT.as_millis().to_string();
            let to_port_arg = to_port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port_arg, "", "0", &timeout_ms, "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            admin(from_port, &args);
        }
        // The target first: once the source hands the slot over, clients
        // are redirected there, and it must serve the slot by then.
        let primaries = self.current_primaries();
        let others = primaries.iter().filter(|&&p| p != from && p != to);
        for i in [to, from].into_iter().chain(others.copied()) {
            admin(
                self.nodes[i].port,
                &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id],
            );
        }
        let moved = poll(HEALTHY_TIMEOUT, || {
            (self.agreed_owner(slot) == Some(to)).then_some(())
        });
        if moved.is_none() {
            panic!(
                "the nodes never agreed that node {to} serves slot {slot}\n{}",
                self.logs()
            );
        }
    }

    /// Runs `redis-cli -c -h 127.0.0.1 -p <a running node> <args>` (in
    /// cluster mode: it follows redirections) and returns its stdout, or an
    /// error carrying its output when it fails.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let port = self.any_running_port().to_string();
        let mut all = vec!["-c", "-h", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        redis_cli(&all)
    }

    /// The cluster node id of node `i` (`CLUSTER MYID`; it survives
    /// restarts, being kept in `nodes.conf`).
    pub fn node_id(&self, i: usize) -> String {
        query_within(self.nodes[i].port, COMMAND_TIMEOUT, &["CLUSTER", "MYID"])
            .unwrap_or_else(|e| panic!("CLUSTER MYID on node {i}: {e}"))
    }

    /// The indexes of the running nodes that serve slots now, as the first
    /// answering node sees it.
    pub fn current_primaries(&self) -> Vec<usize> {
        let view = self
            .running()
            .iter()
            .find_map(|&i| self.view(i))
            .unwrap_or_default();
        let mut primaries: Vec<usize> = view
            .iter()
            .filter(|line| line.has("master") && !line.slots.is_empty())
            .filter_map(|line| self.index_of(line.port))
            .filter(|&i| self.is_running(i))
            .collect();
        primaries.sort_unstable();
        primaries
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
