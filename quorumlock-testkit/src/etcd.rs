//! Local etcd clusters for tests: N `etcd` members on free loopback ports,
//! in a temporary directory of their own, killed and reaped when dropped.
//! Like [`crate::server`], everything here blocks (std only, no runtime);
//! the cluster is driven through `etcdctl` (API v3), so no client is needed.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::server::{Paused, hold_port};

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

/// How many fresh sets of ports to try when another process takes one of
/// ours between finding it free and a member binding it.
const PORT_ATTEMPTS: usize = 5;

/// One member of the cluster.
#[derive(Debug, Default)]
struct Member {
    client_port: u16,
    peer_port: u16,
    /// Raft member id, learned once the cluster first had a leader (it
    /// survives restarts: it is stored in the data dir).
    id: Option<u64>,
    child: Option<Child>,
    /// While the member is killed, its ports bound but not listening: refused
    /// as by a dead process, and handed to no other process.
    port_holds: Vec<tokio::net::TcpSocket>,
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
    dir: PathBuf,
    token: String,
    members: Vec<Member>,
}

// No `is_empty`: a cluster always has at least one member.
#[allow(clippy::len_without_is_empty)]
impl EtcdCluster {
    /// Starts a cluster of `members` members (1 or 3, typically) and waits
    /// until it has a leader, panicking with the members' logs when it
    /// cannot.
    pub fn start(members: usize) -> EtcdCluster {
        assert!(members > 0, "an etcd cluster needs at least one member");
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut cluster = Self::fresh(members).unwrap_or_else(|e| panic!("etcd cluster: {e}"));
            match cluster.boot() {
                Ok(()) => return cluster,
                // Someone took one of the ports in the meantime: try others.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{}", last_error.expect("at least one attempt"));
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,...`: the client ports of all members.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// `etcd://127.0.0.1:P`: member `i` alone.
    pub fn member_url(&self, i: usize) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port(i))
    }

    /// The client port of member `i` (kept across restarts).
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`, for `etcdctl --endpoints`.
    pub fn endpoints(&self) -> String {
        endpoints_of(self.members.iter())
    }

    /// The number of members, running or not.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The index of the leader that the running members that answer agree
    /// on, waiting (polling) up to a few seconds for them to agree, e.g.
    /// during an election; panics with the logs when they do not. A paused
    /// leader stays the answer until the others have elected a new one.
    pub fn leader(&self) -> usize {
        poll(LEADER_TIMEOUT, || self.agreed_leader()).unwrap_or_else(|| {
            let status = self.statuses(&self.running());
            panic!(
                "etcd members never agreed on a running leader; status: {status:?}\n{}",
                self.logs()
            )
        })
    }

    /// SIGKILLs member `i` and reaps it (a crash); its data dir stays, and
    /// its ports are held until a restart. Idempotent.
    pub fn kill(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Some(mut child) = member.child.take() {
            // A SIGSTOPped process dies on SIGKILL too.
            let _ = child.kill();
            let _ = child.wait();
            let ports = [member.client_port, member.peer_port];
            member.port_holds = ports.into_iter().filter_map(hold_port).collect();
        }
    }

    /// Kills member `i` if it runs and starts it again with the same name,
    /// ports and data dir (etcd rejoins from its data dir and ignores the
    /// initial-cluster flags), then waits until it answers and agrees with
    /// the others on a leader; panics with its log when it does not.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i).unwrap_or_else(|e| panic!("etcd member m{i}: {e}"));
        let mut exited = None;
        let rejoined = poll(STARTUP_TIMEOUT, || {
            exited = self.exited(i);
            let answered = self.statuses(&[i]).first().is_some_and(|s| s.leader != 0);
            (exited.is_some() || answered && self.agreed_leader().is_some()).then_some(())
        });
        if rejoined.is_none() || exited.is_some() {
            let why = exited.map_or("did not rejoin".into(), |e| format!("exited ({e})"));
            panic!("etcd member m{i} {why} after a restart; log:\n{}", self.log(i));
        }
    }

    /// Freezes member `i` with SIGSTOP until the returned guard is dropped
    /// (SIGCONT). While frozen, connects succeed but requests hang, and
    /// the others stop hearing from it.
    pub fn pause(&self, i: usize) -> Paused {
        Paused::stop(self.pids()[i].unwrap_or_else(|| panic!("pause: etcd member m{i} is not running")))
    }

    /// Whether member `i` has been started and not killed (a paused member
    /// is running).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Member `i`'s log so far (etcd's stderr, across restarts).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
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

    /// The process id of each member, while it runs.
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.members
            .iter()
            .map(|m| m.child.as_ref().map(Child::id))
            .collect()
    }

    /// A cluster of `n` members on fresh ports and a fresh directory, none
    /// of them started yet.
    fn fresh(n: usize) -> io::Result<EtcdCluster> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}-{count}-{nanos}", std::process::id());
        let dir = std::env::temp_dir().join(format!("quorumlock-etcd-{unique}"));
        std::fs::create_dir_all(&dir)?;
        let ports = free_ports(2 * n)?;
        let members = ports
            .chunks(2)
            .map(|pair| Member {
                client_port: pair[0],
                peer_port: pair[1],
                ..Member::default()
            })
            .collect();
        // Unique per cluster, so that members of two clusters that meet on
        // a reused port refuse each other instead of merging.
        let token = format!("quorumlock-{unique}");
        Ok(EtcdCluster { dir, token, members })
    }

    /// Spawns every member and waits until all of them answer and agree
    /// on a leader; `AddrInUse` when a member lost one of its ports.
    fn boot(&mut self) -> io::Result<()> {
        for i in 0..self.len() {
            self.spawn(i)?;
        }
        let all: Vec<usize> = (0..self.len()).collect();
        let mut exited = None;
        let statuses = poll(STARTUP_TIMEOUT, || {
            exited = all.iter().find_map(|&i| self.exited(i).map(|e| (i, e)));
            let statuses = self.statuses(&all);
            (exited.is_some() || self.has_founding_leader(&statuses)).then_some(statuses)
        });
        match (statuses, exited) {
            (Some(statuses), None) => {
                for member in &mut self.members {
                    let status = statuses.iter().find(|s| s.client_port == member.client_port);
                    member.id = status.map(|s| s.member_id);
                }
                Ok(())
            }
            (_, exited) => {
                let why = exited.map_or("no leader in time".into(), |(i, e)| format!("m{i} exited ({e})"));
                let logs = self.logs();
                // A member that lost one of its ports to another process.
                let kind = match logs.contains("address already in use") {
                    true => io::ErrorKind::AddrInUse,
                    false => io::ErrorKind::Other,
                };
                let message = format!("etcd cluster did not start: {why}\n{logs}");
                Err(io::Error::new(kind, message))
            }
        }
    }

    /// Whether every member answered, all of one cluster, and all name
    /// the same leader among themselves.
    fn has_founding_leader(&self, statuses: &[Status]) -> bool {
        statuses.first().is_some_and(|first| {
            let agrees = |s: &Status| s.leader == first.leader && s.cluster_id == first.cluster_id;
            statuses.len() == self.len()
                && statuses.iter().all(agrees)
                && statuses.iter().any(|s| s.member_id == first.leader)
        })
    }

    /// The running leader that every running member that answers names,
    /// if they agree.
    fn agreed_leader(&self) -> Option<usize> {
        let statuses = self.statuses(&self.running());
        let leader = statuses.first()?.leader;
        if leader == 0 || statuses.iter().any(|s| s.leader != leader) {
            return None;
        }
        let i = self.members.iter().position(|m| m.id == Some(leader))?;
        self.is_running(i).then_some(i)
    }

    /// Starts member `i`'s process (without waiting for it).
    fn spawn(&mut self, i: usize) -> io::Result<()> {
        let mut initial_cluster = Vec::new();
        for (j, m) in self.members.iter().enumerate() {
            initial_cluster.push(format!("m{j}=http://127.0.0.1:{}", m.peer_port));
        }
        let member = &self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        // Appended, so that a restarted member's log follows its earlier life.
        let path = self.log_path(i);
        let log = File::options().append(true).create(true).open(path)?;
        // None of these has a space; the data dir (under the temp dir) may.
        // zap, because etcd 3.4 warns that its default logger is deprecated;
        // to stderr, so that the log file also holds what the Go runtime
        // prints when etcd panics.
        let flags = format!(
            "--name m{i} --listen-client-urls {client} --advertise-client-urls {client} \
             --listen-peer-urls {peer} --initial-advertise-peer-urls {peer} --initial-cluster {} \
             --initial-cluster-state new --initial-cluster-token {} --heartbeat-interval {HEARTBEAT_MS} \
             --election-timeout {ELECTION_MS} --logger zap --log-outputs stderr",
            initial_cluster.join(","),
            self.token
        );
        let mut cmd = Command::new("etcd");
        cmd.args(flags.split_whitespace())
            .arg("--data-dir")
            .arg(self.dir.join(format!("m{i}")))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        // etcd refuses to start on architectures it does not support
        // unless told that this one is wanted.
        if let Some(arch) = unsupported_arch() {
            cmd.env("ETCD_UNSUPPORTED_ARCH", arch);
        }
        self.members[i].port_holds.clear();
        self.members[i].child = Some(cmd.spawn().map_err(with_install_hint)?);
        Ok(())
    }

    /// `endpoint status` of members `which`, of those that answer within
    /// the probe timeout.
    fn statuses(&self, which: &[usize]) -> Vec<Status> {
        if which.is_empty() {
            return Vec::new();
        }
        let endpoints = endpoints_of(which.iter().map(|&i| &self.members[i]));
        let args: Vec<&str> = STATUS_PROBE.split(' ').collect();
        // etcdctl fails when any endpoint does not answer, but still
        // prints the status of those that did.
        match etcdctl(&endpoints, &args) {
            Ok(output) => parse_statuses(&String::from_utf8_lossy(&output.stdout)),
            Err(_) => Vec::new(),
        }
    }

    /// The indexes of the running members.
    fn running(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_running(i)).collect()
    }

    /// How member `i` ended, when its process has exited on its own.
    fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        self.members[i].child.as_mut()?.try_wait().ok().flatten()
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("m{i}.log"))
    }

    /// Every member's log, for failure messages.
    fn logs(&self) -> String {
        (0..self.len())
            .map(|i| format!("--- m{i}, port {}:\n{}", self.client_port(i), self.log(i)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Calls `condition` every 20 ms until it gives a value, or `None` once
/// `limit` has passed.
pub(crate) fn poll<T>(limit: Duration, mut condition: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    loop {
        if let Some(value) = condition() {
            return Some(value);
        }
        if started.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
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
        .map_err(with_install_hint)
}

/// `e`, or the install hint when the program was not found.
fn with_install_hint(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, ETCD_INSTALL_HINT),
        _ => e,
    }
}

/// `127.0.0.1:P1,127.0.0.1:P2,...` of `members`.
fn endpoints_of<'a>(members: impl Iterator<Item = &'a Member>) -> String {
    let endpoints: Vec<String> = members.map(|m| format!("127.0.0.1:{}", m.client_port)).collect();
    endpoints.join(",")
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

/// `n` distinct ports that were free a moment ago: all bound at once, so
/// that the OS cannot hand out one twice, then released for the members.
pub(crate) fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
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
