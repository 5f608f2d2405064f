//! `check --help`: examples, the permissions a node's user needs, the
//! `--key` states, the JSON fields and the exit status. The probe's names
//! and the commands, grouped by what each is needed for, come from the
//! library's list, so that the help names exactly what the check tries.

use std::fmt::Write as _;

use quorumlock::probe::{self as cli_probe, COMMANDS, Need, Probe};

const EXAMPLES: &str = "\
Examples:
  quorumlock check --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  QUORUMLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 quorumlock check --strict
  quorumlock check --nodes-file /etc/quorumlock/nodes --key archive:nightly --json
  quorumlock check --nodes etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --key archive:nightly
  quorumlock check --nodes zk://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/locks --key archive:nightly
  quorumlock check --nodes redis+cluster://10.0.1.1:7000,10.0.1.2:7000,redis+sentinel://10.0.2.1:26379,10.0.2.2:26379/locks,redis://10.0.3.1:6379";

/// The width the command lists are wrapped to.
const WIDTH: usize = 80;

const REST: &str = "\
--key K: for each node, whether K is absent, held with a ttl, held WITHOUT a
ttl (an error: no lock on K can be taken there until someone deletes it), or
holds another type than a string (an error: other data uses the name).

--json prints one object instead of the table (usage errors stay on stderr):
  status        \"ok\", \"warning\" or \"error\" (the worst finding)
  exit_code     the exit status (0 or 1)
  nodes_total, usable, majority
  nodes         one object per node, in the order given:
    index (from 1), node (host:port/db, never a password), status,
    ping_ms, version, role, appendonly, appendfsync, clock_offset_ms,
    clock_uncertainty_ms, clock_rate (the node's clock speed against this
    host's: 1.0 is the same), clock_rate_error (each null when unknown),
    missing_permissions (command names, e.g. [\"PUBLISH\"]),
    keys: [{key, state (\"absent\", \"held\", \"held_without_ttl\",
      \"wrong_type\", \"unknown\"), type, ttl_ms}],
    findings: [{level (\"warning\", \"error\"), code, message}]
  findings      about the set of nodes: [{level, code, message}]
Codes are stable identifiers (e.g. unreachable, auth_failed, missing_permission,
key_without_ttl, no_persistence); messages are for people and may change.

A Redis Cluster member (redis+cluster://) is one row, followed by a row for
each primary that CLUSTER SLOTS names now (1.1, 1.2, ...), each checked like a
node on keys of a slot it serves, CLUSTER SLOTS included; its primaries and
their slot ranges are listed. Codes: unreachable (no server of the cluster
answered CLUSTER SLOTS) and slots_uncovered (slots no primary serves: a lock
whose key hashes there cannot be taken on the member). A Sentinel member
(redis+sentinel://) is one row, followed by a row for the master the sentinels
name now, checked like a node (no_master when they name none). Such a member
counts once towards the majority; a finding on one of its servers counts
against the member. JSON adds to such a member kind (\"cluster\", \"sentinel\"),
primaries: [{address (host:port), slots: [[first, last], ...]}] or master_name
and master (host:port, null when none), and servers: one object per server, as
for a node.

On an etcd cluster (one etcd:// URL, a build with the `etcd` feature) the rows
are the members listed in the URL (latency, version, leader or follower), and
the check grants a lease, writes a throwaway key under it in a transaction and
revokes it, as the URL's user. Codes: unreachable and no_leader (a member),
lock_operations (with etcd's message, e.g. permission denied), no_majority
(fewer than a majority of the cluster's members answer with a leader; members
not listed are not counted against it), members_missing (a warning: the client
cannot fail over to members not listed) and even_members (a warning). JSON adds
cluster_size (members the cluster has, null when unknown) and, with --key,
keys: the lock's holder as `quorumlock status --json` shows it.

On a ZooKeeper ensemble (one zk:// URL, a build with the `zookeeper` feature)
the rows are the servers listed in the URL (latency, version, mode: leader,
follower, standalone, observer), asked with the four-letter word srvr, which
ZooKeeper allows by default; the check takes and releases a lock with a
throwaway name (quorumlock-check-<random>) as the URL's user. Codes:
unreachable, bad_reply (not a srvr reply), not_serving (looking for a leader)
and read_only (a server), lock_operations (with the error), no_leader (none of
the servers that answer leads: an election, or the leader is not listed),
several_ensembles (more than one server leads), no_majority (fewer than a
majority of the servers listed serve) and even_servers (a warning). JSON adds
each server's zxid and, with --key, keys as for etcd.

Exit status: 0 when every node is usable (warnings allowed unless --strict),
1 when a node is unreachable, refuses a command every lock needs, is a replica
that refuses writes, is listed twice, or holds a --key without a ttl (on etcd:
any error above, one dead member of three included; on ZooKeeper likewise);
2 on bad usage.";

/// The text after the options.
pub(super) fn text() -> String {
    format!("{EXAMPLES}\n\n{}\n{REST}", permissions())
}

/// The probe's names, the patterns a user needs, and the commands by need.
fn permissions() -> String {
    let probe = Probe::new("ID");
    let (keys, channels) = (cli_probe::key_pattern(), cli_probe::channel_pattern());
    let mut text = format!(
        "Permissions: every command the library sends is tried as the URL's user,
on throwaway keys ({}, {},
deleted again, and expiring by themselves within seconds) and a throwaway
channel ({}). A user needs the lock keys, the reserved
keys and the wake-up channels: ~yourkeys:* {keys} {channels}
(Redis 7 gives a new ACL user no channels). A missing command is an error
when every lock needs it, else a warning:
",
        probe.key, probe.queue, probe.channel
    );
    let mut needs: Vec<Need> = Vec::new();
    for command in COMMANDS {
        if !needs.contains(&command.need) {
            needs.push(command.need);
        }
    }
    for need in needs {
        let names = COMMANDS.iter().filter(|c| c.need == need).map(|c| c.name);
        wrap(&mut text, &format!("  {}:", label(need)), names);
    }
    text
}

fn label(need: Need) -> &'static str {
    match need {
        Need::Lock => "every lock (errors)",
        Need::Handoff => "the hand-off (waiters then poll)",
        Need::ReplicaAck => "replica acknowledgement",
        Need::Cluster => "a Redis Cluster member's routing",
        Need::Operator => "status and unlock",
        Need::Check => "this check's own view",
    }
}

/// `head` and the comma-separated `names`, wrapped to [`WIDTH`] with an
/// indented continuation, as lines of `text`.
fn wrap<'a>(text: &mut String, head: &str, names: impl Iterator<Item = &'a str>) {
    let mut line = head.to_owned();
    let mut names = names.peekable();
    while let Some(name) = names.next() {
        let word = if names.peek().is_some() {
            format!("{name},")
        } else {
            name.to_owned()
        };
        if line.len() + 1 + word.len() > WIDTH {
            let _ = writeln!(text, "{line}");
            line = "    ".to_owned();
        } else {
            line.push(' ');
        }
        line.push_str(&word);
    }
    let _ = writeln!(text, "{line}");
}
