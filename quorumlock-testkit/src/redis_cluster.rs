//! Local Redis Clusters for tests: `redis-server --cluster-enabled yes`
//! nodes on free loopback ports (each with its own directory and
//! `nodes.conf`), formed with `redis-cli --cluster create`, killed and
//! reaped when dropped. Like [`crate::server`], everything here blocks (std
//! only, no runtime).
//!
//! Node indexes are fixed once the cluster has formed: `0..primaries` are
//! the first primaries (by slot range), the rest their replicas, in the
//! order of their primaries. Roles change on a failover; indexes do not.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::etcd::poll;
use crate::redis_proc::{COMMAND_TIMEOUT, Proc, fresh_dir, info_field, path_str, probe, query_within};
use crate::server::Paused;

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

/// What one node says about one node (a line of `CLUSTER NODES`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeLine {
    port: u16,
    flags: Vec<String>,
    /// Slot ranges it serves (inclusive), migration markers left out.
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
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
    /// Starts `primaries` primaries (at least 3, as `redis-cli --cluster
    /// create` wants) with `replicas_per_primary` replicas each, forms the
    /// cluster and waits until every node serves all 16384 slots; panics
    /// with the logs when it cannot.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> RedisCluster {
        assert!(
            primaries >= 3,
            "redis-cli --cluster create wants at least 3 primaries"
        );
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
        let from = self.primary_for_slot(slot);
        if from == to {
            return;
        }
        let (from_port, to_port) = (self.nodes[from].port, self.nodes[to].port);
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let slot_arg = slot.to_string();
        admin(to_port, &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]);
        admin(from_port, &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]);
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
            let mut args = vec!["MIGRATE", "127.0.0.1", "", "", "0", &timeout_ms, "KEYS"];
            let to_port_arg = to_port.to_string();
            args[2] = &to_port_arg;
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

/// Forming the cluster and looking at it.
impl RedisCluster {
    /// Starts the nodes on fresh ports, forms the cluster and orders the
    /// nodes; `AddrInUse` when a node lost one of its ports.
    fn try_start(primaries: usize, replicas: usize) -> io::Result<RedisCluster> {
        let dir = fresh_dir("redis-cluster")?;
        let mut cluster = RedisCluster {
            dir,
            primaries,
            nodes: Vec::new(),
        };
        for port in free_cluster_ports(primaries * (1 + replicas))? {
            let node_dir = cluster.dir.join(format!("node-{port}"));
            let node = Proc::new(
                port,
                vec![port + BUS_PORT_OFFSET],
                node_dir.clone(),
                node_args(port, &node_dir),
            )?;
            cluster.nodes.push(node);
        }
        for node in &mut cluster.nodes {
            node.spawn()?;
        }
        let addresses: Vec<String> = cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        let replicas_arg = replicas.to_string();
        args.extend(["--cluster-replicas", &replicas_arg, "--cluster-yes"]);
        if let Err(e) = redis_cli(&args) {
            return Err(io::Error::other(format!("{e}\n{}", cluster.logs())));
        }
        cluster.wait_healthy();
        cluster.order_nodes();
        Ok(cluster)
    }

    /// Puts the primaries first (by their first slot), then the replicas
    /// in the order of their primaries, so that indexes say the roles the
    /// cluster started with.
    fn order_nodes(&mut self) {
        let view = self.view(0).expect("a healthy cluster answers");
        let primary_rank = |line: &NodeLine| line.slots.first().map(|s| s.0);
        let mut primaries: Vec<&NodeLine> = view.iter().filter(|l| primary_rank(l).is_some()).collect();
        primaries.sort_by_key(|l| primary_rank(l));
        let mut order: Vec<u16> = primaries.iter().map(|l| l.port).collect();
        let replication: Vec<String> = self
            .ports()
            .iter()
            .map(|&p| probe::<String>(p, &["INFO", "replication"]).unwrap_or_default())
            .collect();
        for primary in &primaries {
            for (node, info) in self.nodes.iter().zip(&replication) {
                let master_port = info_field(info, "master_port").and_then(|p| p.parse().ok());
                if master_port == Some(primary.port) {
                    order.push(node.port);
                }
            }
        }
        assert_eq!(
            order.len(),
            self.len(),
            "every node is a primary or a replica of one"
        );
        self.nodes
            .sort_by_key(|n| order.iter().position(|&p| p == n.port));
    }

    /// Why the cluster is not healthy now, if it is not (see
    /// [`RedisCluster::wait_healthy`]).
    fn health(&self) -> Result<(), String> {
        let running = self.running();
        let mut first_owners = None;
        for &i in &running {
            let port = self.nodes[i].port;
            let info: String =
                probe(port, &["CLUSTER", "INFO"]).ok_or(format!("node {i} does not answer"))?;
            for (field, want) in [
                ("cluster_state", "ok"),
                ("cluster_slots_assigned", "16384"),
                ("cluster_slots_ok", "16384"),
            ] {
                if info_field(&info, field) != Some(want) {
                    return Err(format!("node {i} (port {port}) says {info:?}"));
                }
            }
            let view = self.view(i).ok_or(format!("node {i} gave no CLUSTER NODES"))?;
            for &j in &running {
                let line = view.iter().find(|l| l.port == self.nodes[j].port);
                let flagged = ["fail", "fail?", "handshake", "noaddr"];
                if line.is_none_or(|l| flagged.iter().any(|f| l.has(f))) {
                    return Err(format!("node {i} sees node {j} as {line:?}"));
                }
            }
            let owners = owners(&view);
            if owners
                .iter()
                .any(|(_, p)| self.index_of(*p).is_none_or(|o| !self.is_running(o)))
            {
                return Err(format!("node {i} has slots on a dead node: {owners:?}"));
            }
            match &first_owners {
                None => first_owners = Some(owners),
                Some(first) if *first != owners => {
                    return Err(format!("node {i} has other slot owners: {owners:?} vs {first:?}"));
                }
                Some(_) => {}
            }
            let me = view.iter().find(|l| l.has("myself"));
            if me.is_some_and(|l| l.has("slave")) {
                let replication: String = probe(port, &["INFO", "replication"]).unwrap_or_default();
                if info_field(&replication, "master_link_status") != Some("up") {
                    return Err(format!("replica {i}'s link is not up: {replication:?}"));
                }
            }
        }
        Ok(())
    }

    /// The running node that every answering running node names as the
    /// owner of `slot`, if they agree.
    fn agreed_owner(&self, slot: u16) -> Option<usize> {
        let mut agreed = None;
        for i in self.running() {
            let Some(view) = self.view(i) else { continue };
            let owner = view
                .iter()
                .find(|l| l.has("master") && l.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
                .map(|l| l.port);
            match (agreed, owner) {
                (_, None) => return None,
                (None, Some(port)) => agreed = Some(port),
                (Some(a), Some(port)) if a != port => return None,
                _ => {}
            }
        }
        let index = self.index_of(agreed?)?;
        self.is_running(index).then_some(index)
    }

    /// Node `i`'s `CLUSTER NODES`, if it answers.
    fn view(&self, i: usize) -> Option<Vec<NodeLine>> {
        let text: String = probe(self.nodes[i].port, &["CLUSTER", "NODES"])?;
        Some(text.lines().filter_map(parse_node_line).collect())
    }

    fn index_of(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port == port)
    }

    fn running(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_running(i)).collect()
    }

    fn any_running_port(&self) -> u16 {
        let i = self.running().into_iter().next().expect("no cluster node runs");
        self.nodes[i].port
    }

    /// `127.0.0.1:P` of nodes `0..primaries`.
    fn seeds(&self) -> Vec<String> {
        self.nodes[..self.primaries]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// Every node's log, for failure messages.
    fn logs(&self) -> String {
        let logs: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("--- node {i}, port {}:\n{}", n.port, n.log()))
            .collect();
        logs.join("\n")
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

/// The `redis-server` arguments of a cluster node on `port` in `dir`.
fn node_args(port: u16, dir: &std::path::Path) -> Vec<String> {
    let timeout = NODE_TIMEOUT_MS.to_string();
    let port = port.to_string();
    let dir = path_str(dir);
    let args = [
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--dir",
        &dir,
        "--logfile",
        crate::redis_proc::LOG_FILE,
        "--appendonly",
        "no",
        "--save",
        "",
        "--enable-debug-command",
        "local",
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        &timeout,
        // A replica takes over however long ago it last heard from its
        // primary (a test may pause a primary for long before killing it).
        "--cluster-replica-validity-factor",
        "0",
        // Replicas (a restarted former primary) sync at once, not after 5 s.
        "--repl-diskless-sync-delay",
        "0",
    ];
    args.iter().map(|s| s.to_string()).collect()
}

/// Runs `redis-cli <args>`, returning its stdout, or an error with its
/// output when it fails.
fn redis_cli(args: &[&str]) -> io::Result<String> {
    let output = Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    // redis-cli exits 0 on an error reply; it prints it as "(error) ...",
    // or, its stdout not being a terminal, as "ERR ...".
    let error_reply = stdout.starts_with("(error)") || stdout.starts_with("ERR ");
    if !output.status.success() || error_reply {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(io::Error::other(format!(
            "redis-cli {args:?} failed ({}): {stdout}{stderr}",
            output.status
        )));
    }
    Ok(stdout)
}

/// Sends an administrative command to `port`, panicking unless it
/// succeeds.
fn admin(port: u16, args: &[&str]) {
    let reply: redis::RedisResult<redis::Value> = query_within(port, COMMAND_TIMEOUT, args);
    if let Err(e) = reply {
        panic!("{args:?} on port {port}: {e}");
    }
}

/// The slot ranges and the port serving each, sorted, of a view.
fn owners(view: &[NodeLine]) -> Vec<((u16, u16), u16)> {
    let mut owners: Vec<_> = view
        .iter()
        .filter(|l| l.has("master"))
        .flat_map(|l| l.slots.iter().map(move |&range| (range, l.port)))
        .collect();
    owners.sort_unstable();
    owners
}

/// A line of `CLUSTER NODES`: `<id> <ip:port@bus> <flags> <master>
/// <ping-sent> <pong-recv> <epoch> <link> <slot>...`, where a slot is `N`,
/// `A-B` or a migration marker `[N->-id]`.
fn parse_node_line(line: &str) -> Option<NodeLine> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let address = fields.get(1)?.split('@').next()?;
    let slots = fields
        .get(8..)
        .unwrap_or_default()
        .iter()
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|n| (n, n)),
        })
        .collect();
    Some(NodeLine {
        port: address.rsplit(':').next()?.parse().ok()?,
        flags: fields.get(2)?.split(',').map(str::to_owned).collect(),
        slots,
    })
}

/// `n` distinct client ports whose bus ports (+10000) were free a moment
/// ago as well: all bound at once, so that the OS hands out none twice,
/// then released for the nodes.
fn free_cluster_ports(n: usize) -> io::Result<Vec<u16>> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..n * 100 {
        if ports.len() == n {
            return Ok(ports);
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let Some(bus) = port.checked_add(BUS_PORT_OFFSET) else {
            continue;
        };
        if let Ok(bus_listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, bus)) {
            held.extend([listener, bus_listener]);
            ports.push(port);
        }
    }
    match ports.len() == n {
        true => Ok(ports),
        false => Err(io::Error::other("no free pairs of ports (P, P+10000)")),
    }
}
