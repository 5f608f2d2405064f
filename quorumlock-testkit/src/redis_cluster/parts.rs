//! How a [`RedisCluster`] is formed and how it looks to its nodes:
//! `CLUSTER NODES` views, health, slot owners, and the processes' ports and
//! arguments.

use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Command, Stdio};

use super::{BUS_PORT_OFFSET, CLUSTER_SLOTS, NODE_TIMEOUT_MS, RedisCluster};
use crate::redis_proc::{COMMAND_TIMEOUT, Proc, fresh_dir, info_field, path_str, probe, query_within};

/// What one node says about one node (a line of `CLUSTER NODES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeLine {
    pub(super) port: u16,
    pub(super) flags: Vec<String>,
    /// Slot ranges it serves (inclusive), migration markers left out.
    pub(super) slots: Vec<(u16, u16)>,
}

impl NodeLine {
    pub(super) fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// Forming the cluster and looking at it.
impl RedisCluster {
    /// Starts the nodes on fresh ports, forms the cluster and orders the
    /// nodes; `AddrInUse` when a node lost one of its ports.
    pub(super) fn try_start(primaries: usize, replicas: usize) -> io::Result<RedisCluster> {
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
        if primaries < 3 {
            cluster.form_by_hand(replicas)?;
        } else {
            let addresses: Vec<String> = cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
            let mut args = vec!["--cluster", "create"];
            args.extend(addresses.iter().map(String::as_str));
            let replicas_arg = replicas.to_string();
            args.extend(["--cluster-replicas", &replicas_arg, "--cluster-yes"]);
            if let Err(e) = redis_cli(&args) {
                return Err(io::Error::other(format!("{e}\n{}", cluster.logs())));
            }
        }
        cluster.wait_healthy();
        cluster.order_nodes();
        Ok(cluster)
    }

    /// Puts the primaries first (by their first slot), then the replicas
    /// in the order of their primaries, so that indexes say the roles the
    /// cluster started with.
    pub(super) fn order_nodes(&mut self) {
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
    pub(super) fn health(&self) -> Result<(), String> {
        let running = self.running();
        let mut first_owners = None;
        let slots = CLUSTER_SLOTS.to_string();
        for &i in &running {
            let port = self.nodes[i].port;
            let info: String =
                probe(port, &["CLUSTER", "INFO"]).ok_or(format!("node {i} does not answer"))?;
            for (field, want) in [
                ("cluster_state", "ok"),
                ("cluster_slots_assigned", slots.as_str()),
                ("cluster_slots_ok", slots.as_str()),
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
    pub(super) fn agreed_owner(&self, slot: u16) -> Option<usize> {
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
    pub(super) fn view(&self, i: usize) -> Option<Vec<NodeLine>> {
        let text: String = probe(self.nodes[i].port, &["CLUSTER", "NODES"])?;
        Some(text.lines().filter_map(parse_node_line).collect())
    }

    pub(super) fn index_of(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port == port)
    }

    pub(super) fn running(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_running(i)).collect()
    }

    pub(super) fn any_running_port(&self) -> u16 {
        let i = self.running().into_iter().next().expect("no cluster node runs");
        self.nodes[i].port
    }

    /// `127.0.0.1:P` of nodes `0..primaries`.
    pub(super) fn seeds(&self) -> Vec<String> {
        self.nodes[..self.primaries]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// Every node's log, for failure messages.
    pub(super) fn logs(&self) -> String {
        let logs: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("--- node {i}, port {}:\n{}", n.port, n.log()))
            .collect();
        logs.join("\n")
    }
}

/// The `redis-server` arguments of a cluster node on `port` in `dir`.
pub(super) fn node_args(port: u16, dir: &std::path::Path) -> Vec<String> {
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

/// What to tell a user whose machine has no `redis-cli`.
const REDIS_CLI_HINT: &str = "redis-cli was not found on PATH; install it with \
     `sudo apt-get install -y redis-tools` (Debian/Ubuntu), `sudo dnf install redis` (Fedora) \
     or `brew install redis` (macOS)";

/// Runs `redis-cli <args>`, returning its stdout, or an error with its
/// output when it fails.
pub(super) fn redis_cli(args: &[&str]) -> io::Result<String> {
    let output = Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, REDIS_CLI_HINT),
            _ => e,
        })?;
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
pub(super) fn admin(port: u16, args: &[&str]) {
    let reply: redis::RedisResult<redis::Value> = query_within(port, COMMAND_TIMEOUT, args);
    if let Err(e) = reply {
        panic!("{args:?} on port {port}: {e}");
    }
}

/// The slot ranges and the port serving each, sorted, of a view.
pub(super) fn owners(view: &[NodeLine]) -> Vec<((u16, u16), u16)> {
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
pub(super) fn parse_node_line(line: &str) -> Option<NodeLine> {
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
pub(super) fn free_cluster_ports(n: usize) -> io::Result<Vec<u16>> {
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
