//! Local etcd clusters for tests: N `etcd` members on free loopback ports,
//! in a temporary directory of their own, killed and reaped when dropped.
//! Like [`crate::server`], everything here blocks (std only, no runtime);
//! the cluster is driven through `etcdctl` (API v3), so no client is needed.
//! The member processes (ports, logs, kill, restart, pause) are the kit's
//! `MemberSet`, which a ZooKeeper ensemble shares; what is etcd's here is
//! the command line of a member and the status probes.

use std::io;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::members::{MemberSet, Store, member_methods, with_hint};

/// What to tell a user whose machine has no `etcd` or `etcdctl`.
pub const ETCD_INSTALL_HINT: &str = "etcd or etcdctl was not found on PATH; install them with \
     `sudo apt-get install -y etcd-server etcd-client` (Debian/Ubuntu)";

/// Raft heartbeat interval in milliseconds. etcd's default (100 ms) is
/// tuned for real networks; on loopback a round trip takes microseconds,
/// so a shorter one lets followers notice a dead leader sooner.
const HEARTBEAT_MS: u32 = 50;

/// Raft election timeout in milliseconds: a follower that has heard no
/// heartbeat for this long starts an election. With etcd's default (1 s)
/// a test that kills the leader waits one to two seconds for a new one;
/// with this, well under a second. etcd requires at least 5 heartbeats.
const ELECTION_MS: u32 = 500;

/// How long the members may take to elect their first leader, and a
/// restarted member to rejoin. Generous: creating a member's write-ahead
/// log fsyncs, which alone takes seconds on a slow disk.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`EtcdCluster::leader`] waits for the members to agree on one.
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The harness's own status probe, with a short timeout: a paused or dead
/// member must not hold up a probe of the others for etcdctl's default 5 s.
const STATUS_PROBE: &str = "--dial-timeout 1s --command-timeout 1s endpoint status -w json";

/// An [`EtcdCluster`]'s side of its [`MemberSet`]: what it learned of its
/// members.
#[derive(Clone, Debug, Default)]
struct Etcd {
    /// Each member's Raft member id, learned once the cluster first had a
    /// leader (it survives restarts: it is stored in the data dir).
    ids: Vec<Option<u64>>,
}

/// What one member said to `etcdctl endpoint status`.
#[derive(Debug)]
struct Status {
    client_port: u16,
    member_id: u64,
    cluster_id: u64,
    leader: u64,
}

/// N etcd member processes on 127.0.0.1, forming one cluster.
#[derive(Debug)]
pub struct EtcdCluster {
    members: MemberSet<Etcd>,
}

// No `is_empty`: a cluster always has at least one member.
#[allow(clippy::len_without_is_empty)]
impl EtcdCluster {
    /// Starts a cluster of `members` members (1 or 3, typically) and waits
    /// until it has a leader, panicking with the members' logs when it
    /// cannot.
    pub fn start(members: usize) -> EtcdCluster {
        assert!(members > 0, "an etcd cluster needs at least one member");
        EtcdCluster {
            members: MemberSet::start(members, Etcd::default()),
        }
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,...`: the client ports of all members.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// `etcd://127.0.0.1:P`: member `i` alone.
    pub fn member_url(&self, i: usize) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port(i))
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`, for `etcdctl --endpoints`.
    pub fn endpoints(&self) -> String {
        self.members.hosts(0..self.len())
    }

    member_methods! {
        members,
        "member",
        leader: "A paused leader stays the answer until the others have elected a new one.",
        restart: "etcd rejoins from its data dir and ignores the initial-cluster flags.",
    }

    /// Runs `etcdctl --endpoints=<all members> <args>` (API v3) and returns
    /// its stdout, or an error carrying its stderr when it fails. A later
    /// `--endpoints` in `args` overrides the first (to address some members
    /// only).
    pub fn etcdctl(&self, args: &[&str]) -> io::Result<String> {
        let output = etcdctl(&self.endpoints(), args)?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "etcdctl {args:?} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The keys under `prefix`, in etcd's (byte) order; panics when etcdctl
    /// fails.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self
            .etcdctl(&["get", prefix, "--prefix", "--keys-only"])
            .unwrap_or_else(|e| panic!("keys under {prefix:?}: {e}"));
        out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
    }
}

impl Store for Etcd {
    /// The client port, then the peer port.
    const PORTS: usize = 2;
    const INSTALL_HINT: &'static str = ETCD_INSTALL_HINT;

    fn command(set: &MemberSet<Etcd>, i: usize) -> io::Result<Command> {
        let initial_cluster: Vec<String> = (0..set.len())
            .map(|j| format!("{}=http://127.0.0.1:{}", set.name(j), set.ports(j)[1]))
            .collect();
        let client = format!("http://127.0.0.1:{}", set.client_port(i));
        let peer = format!("http://127.0.0.1:{}", set.ports(i)[1]);
        // Unique per cluster (the name of its directory), so that members
        // of two clusters that meet on a reused port refuse each other
        // instead of merging.
        let token = set.dir().file_name().unwrap_or_default().to_string_lossy();
        // None of these has a space; the data dir (under the temp dir) may.
        // zap, because etcd 3.4 warns that its default logger is deprecated;
        // to stderr, so that the log file also holds what the Go runtime
        // prints when etcd panics.
        let flags = format!(
            "--name {} --listen-client-urls {client} --advertise-client-urls {client} \
             --listen-peer-urls {peer} --initial-advertise-peer-urls {peer} --initial-cluster {} \
             --initial-cluster-state new --initial-cluster-token {token} --heartbeat-interval {HEARTBEAT_MS} \
             --election-timeout {ELECTION_MS} --logger zap --log-outputs stderr",
            set.name(i),
            initial_cluster.join(","),
        );
        let mut cmd = Command::new("etcd");
        cmd.args(flags.split_whitespace())
            .arg("--data-dir")
            .arg(set.path(i, ""));
        // etcd refuses to start on architectures it does not support
        // unless told that this one is wanted.
        if let Some(arch) = unsupported_arch() {
            cmd.env("ETCD_UNSUPPORTED_ARCH", arch);
        }
        Ok(cmd)
    }

    const STARTUP_TIMEOUT: Duration = STARTUP_TIMEOUT;

    /// Whether every member answered, all of one cluster, and all name the
    /// same leader among themselves; then keeps their member ids.
    fn formed(set: &mut MemberSet<Etcd>) -> bool {
        let statuses = statuses(set, 0..set.len());
        let formed = statuses.first().is_some_and(|first| {
            let agrees = |s: &Status| s.leader == first.leader && s.cluster_id == first.cluster_id;
            statuses.len() == set.len()
                && statuses.iter().all(agrees)
                && statuses.iter().any(|s| s.member_id == first.leader)
        });
        if formed {
            let id = |i| {
                statuses
                    .iter()
                    .find(|s| s.client_port == set.client_port(i))
                    .map(|s| s.member_id)
            };
            set.store.ids = (0..set.len()).map(id).collect();
        }
        formed
    }

    fn serves(set: &MemberSet<Etcd>, i: usize) -> bool {
        statuses(set, [i]).first().is_some_and(|s| s.leader != 0)
    }

    const LEADER_TIMEOUT: Duration = LEADER_TIMEOUT;

    /// The running leader that every running member that answers names,
    /// if they agree.
    fn agreed_leader(set: &MemberSet<Etcd>) -> Option<usize> {
        let statuses = statuses(set, set.running());
        let leader = statuses.first()?.leader;
        if leader == 0 || statuses.iter().any(|s| s.leader != leader) {
            return None;
        }
        let i = set.store.ids.iter().position(|&id| id == Some(leader))?;
        set.is_running(i).then_some(i)
    }

    const GROUP: &'static str = "etcd cluster";
    const MEMBER: &'static str = "etcd member";
    const PREFIX: &'static str = "m";
    const KIND: &'static str = "etcd";

    fn describe(set: &MemberSet<Etcd>) -> String {
        format!("status: {:?}", statuses(set, set.running()))
    }
}

/// `endpoint status` of members `which`, of those that answer within the
/// probe timeout.
fn statuses(set: &MemberSet<Etcd>, which: impl IntoIterator<Item = usize>) -> Vec<Status> {
    let endpoints = set.hosts(which);
    if endpoints.is_empty() {
        return Vec::new();
    }
    let args: Vec<&str> = STATUS_PROBE.split(' ').collect();
    // etcdctl fails when any endpoint does not answer, but still
    // prints the status of those that did.
    match etcdctl(&endpoints, &args) {
        Ok(output) => parse_statuses(&String::from_utf8_lossy(&output.stdout)),
        Err(_) => Vec::new(),
    }
}

/// Runs `etcdctl --endpoints=<endpoints> <args>` with the v3 API.
fn etcdctl(endpoints: &str, args: &[&str]) -> io::Result<Output> {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| with_hint(e, ETCD_INSTALL_HINT))
}

/// The statuses in `etcdctl endpoint status -w json` output: a flat array
/// of objects, each `{"Endpoint":"127.0.0.1:P","Status":{"header":{
/// "cluster_id":C,"member_id":M,...},...,"leader":L,...}}`.
fn parse_statuses(json: &str) -> Vec<Status> {
    json.split("{\"Endpoint\":\"")
        .skip(1)
        .filter_map(|entry| {
            let endpoint = &entry[..entry.find('"')?];
            Some(Status {
                client_port: endpoint.rsplit(':').next()?.parse().ok()?,
                member_id: json_u64(entry, "member_id")?,
                cluster_id: json_u64(entry, "cluster_id")?,
                leader: json_u64(entry, "leader")?,
            })
        })
        .collect()
}

/// The first unsigned integer field `key` in `json` (ids are u64 and may
/// exceed i64).
fn json_u64(json: &str, key: &str) -> Option<u64> {
    let start = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = json[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The value etcd wants in `ETCD_UNSUPPORTED_ARCH` (Go's name of this
/// architecture), or `None` on those it supports (amd64, arm64, ppc64le).
fn unsupported_arch() -> Option<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" | "aarch64" => None,
        "powerpc64" if cfg!(target_endian = "little") => None,
        "x86" => Some("386"),
        "powerpc64" => Some("ppc64"),
        other => Some(other),
    }
}
