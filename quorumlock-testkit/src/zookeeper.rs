//! Local ZooKeeper ensembles for tests: N servers (Debian's `zookeeper`
//! package, 3.8) on free loopback ports, in a temporary directory of their
//! own, killed and reaped when dropped. Like [`crate::etcd`], everything
//! blocks (std only). Servers are watched with the four-letter word `srvr`
//! over plain TCP; [`ZkEnsemble::children`] reads znodes through kazoo.
//! The server processes (ports, logs, kill, restart, pause) are the kit's
//! `MemberSet`, as an etcd cluster's members are; what is ZooKeeper's here
//! is a server's configuration and command line and the `srvr` probes.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::members::{MemberSet, Store, member_methods, with_hint};

/// What to tell a user whose machine has no ZooKeeper server or no kazoo.
pub const ZOOKEEPER_INSTALL_HINT: &str = "ZooKeeper (java and /usr/share/java/zookeeper.jar) \
     or python3's kazoo was not found; run scripts/ensure-zookeeper.sh, or install them with \
     `sudo apt-get install -y zookeeper` (Debian/Ubuntu) and `pip install kazoo`";

/// The server's jars: Debian's `zookeeper.jar` names its dependencies in
/// its manifest, all but a logging backend; without one, slf4j drops every
/// line and a failed start leaves an empty log. `slf4j-simple` (from
/// `libslf4j-java`, which the package depends on) writes to stderr, needs
/// no configuration file, and logs INFO and above.
const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// JVM flags. The heap cap keeps three servers within a small CI machine
/// (a test ensemble holds a handful of znodes); the serial collector and
/// the C1-only compiler start faster and use fewer threads than the
/// defaults, which are tuned for long-running servers. Log lines carry
/// their time, to line a test's steps up with the servers' logs.
const JVM_FLAGS: &str = "-Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
     -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS";

/// The server's entry point (`zkServer.sh`'s): an ensemble member, or a
/// standalone server when the configuration names no other servers.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// ZooKeeper's time unit in milliseconds (its default is 2000). Every
/// other timing is a number of ticks, and a session may be as short as
/// two ticks: 100 ms lets tests use sessions of a second or two, and
/// lets followers notice a dead leader within [`SYNC_LIMIT_TICKS`].
const TICK_MS: u32 = 100;

/// How many ticks followers have to connect to and sync with a new
/// leader (10 s). Generous, because at start-up the three JVMs of an
/// ensemble come up at different speeds on a loaded machine, and a
/// leader that gives up waiting starts the election over.
const INIT_LIMIT_TICKS: u32 = 100;

/// How many ticks a follower may fall behind, and how long it waits to
/// hear from the leader before it declares it dead (500 ms): what a test
/// that kills the leader waits before an election starts.
const SYNC_LIMIT_TICKS: u32 = 5;

/// The longest session a client may ask for, in milliseconds. ZooKeeper's
/// default is 20 ticks (2 s here), which would silently shorten the
/// sessions of clients that ask for their usual 10 s or more.
const MAX_SESSION_MS: u32 = 30_000;

/// How long the servers may take to start and elect their first leader,
/// and a restarted server to rejoin. Three JVMs starting at once on a
/// loaded CI machine take seconds before they even open their ports.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`ZkEnsemble::leader`] waits for the running servers to agree.
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a `srvr` probe waits to connect, and then for the reply: a
/// paused server accepts connections (the kernel does) but never answers,
/// and must not hold up a probe of the others for long.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long [`ZkEnsemble::children`]'s kazoo client waits to connect, in
/// seconds: with a server of the connect string dead, kazoo may try it
/// first and has to move on to another.
const KAZOO_TIMEOUT_S: u32 = 10;

/// Lists the children of `argv[2]` on the ensemble `argv[1]`, one per line.
const CHILDREN_SCRIPT: &str = include_str!("zookeeper_children.py");

/// A [`ZkEnsemble`]'s side of its [`MemberSet`]: how its servers run.
#[derive(Clone, Debug)]
struct ZooKeeper {
    /// Every transaction fsynced before it is acknowledged, as in
    /// production ([`ZkEnsemble::start_durable`]).
    durable: bool,
}

/// N ZooKeeper server processes on 127.0.0.1, forming one ensemble (or a
/// standalone server when N is 1).
#[derive(Debug)]
pub struct ZkEnsemble {
    servers: MemberSet<ZooKeeper>,
}

// No `is_empty`: an ensemble always has at least one server.
#[allow(clippy::len_without_is_empty)]
impl ZkEnsemble {
    /// Starts an ensemble of `servers` servers (1 or 3, typically) and
    /// waits until every server serves, one of them as the leader (or as
    /// the standalone server), panicking with the servers' logs when they
    /// do not.
    pub fn start(servers: usize) -> ZkEnsemble {
        Self::start_with(servers, false)
    }

    /// As [`ZkEnsemble::start`], with every transaction fsynced to the
    /// servers' logs before it is acknowledged (ZooKeeper's default, and
    /// what production runs): for benchmarks, whose figures must include
    /// the disk as etcd's do. Tests use [`ZkEnsemble::start`], whose servers
    /// skip the fsync, which costs seconds on a slow CI disk.
    pub fn start_durable(servers: usize) -> ZkEnsemble {
        Self::start_with(servers, true)
    }

    fn start_with(servers: usize, durable: bool) -> ZkEnsemble {
        assert!(servers > 0, "a ZooKeeper ensemble needs at least one server");
        if let Some(jar) = CLASSPATH.split(':').find(|jar| !Path::new(jar).exists()) {
            panic!("ZooKeeper ensemble: {jar} is missing; {ZOOKEEPER_INSTALL_HINT}");
        }
        ZkEnsemble {
            servers: MemberSet::start(servers, ZooKeeper { durable }),
        }
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,...`: the client ports of all servers.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: the connect string of ZooKeeper's
    /// clients (kazoo, zkCli).
    pub fn connect_string(&self) -> String {
        self.servers.hosts(0..self.len())
    }

    member_methods! {
        servers,
        "server",
        leader: "A paused server does not answer `srvr` and is left out, so with a paused \
                 leader this waits until the others have elected a new one.",
        restart: "The server keeps its ZooKeeper id (`myid`) too.",
    }

    /// The names of the children of the znode `path`, sorted (so that
    /// sequential nodes come in creation order); empty when it has none or
    /// does not exist. Panics with the client's stderr when the read fails.
    ///
    /// Through a python3 `kazoo` client rather than the package's
    /// `zkCli.sh`: a kazoo call takes about 0.13 s where zkCli's JVM takes
    /// about 0.5 s to start; kazoo's names come one per line where zkCli
    /// prints `[a, b]` (ambiguous for names with ", "), and kazoo tells a
    /// missing znode and a failed connect apart, where zkCli exits 0 on both.
    pub fn children(&self, path: &str) -> Vec<String> {
        let output = Command::new("python3")
            .args(["-c", CHILDREN_SCRIPT, &self.connect_string(), path])
            .arg(KAZOO_TIMEOUT_S.to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "children of {path:?}: python3: {}",
                    with_hint(e, ZOOKEEPER_INSTALL_HINT)
                )
            });
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let hint = match stderr.contains("No module named 'kazoo'") {
                true => ZOOKEEPER_INSTALL_HINT,
                false => "",
            };
            panic!(
                "children of {path:?} failed ({}): {hint}\n{stderr}\n{}",
                output.status,
                self.servers.logs()
            );
        }
        let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    }
}

impl Store for ZooKeeper {
    /// The client port; followers connect to the leader on the second,
    /// and leader election runs over the third.
    const PORTS: usize = 3;
    const INSTALL_HINT: &'static str = ZOOKEEPER_INSTALL_HINT;

    /// Writes server `i`'s configuration and id (ZooKeeper's ids are
    /// 1-based); the command runs it.
    fn command(set: &MemberSet<ZooKeeper>, i: usize) -> io::Result<Command> {
        std::fs::create_dir_all(set.path(i, ""))?;
        std::fs::write(set.path(i, "").join("myid"), format!("{}\n", i + 1))?;
        let config_path = set.path(i, ".cfg");
        std::fs::write(&config_path, config(set, i))?;
        let mut command = Command::new("java");
        command
            .args(JVM_FLAGS.split_whitespace())
            .args(["-cp", CLASSPATH])
            .arg(MAIN_CLASS)
            .arg(&config_path)
            // Anything the JVM writes beside its data lands in the ensemble's dir.
            .current_dir(set.dir());
        Ok(command)
    }

    const STARTUP_TIMEOUT: Duration = STARTUP_TIMEOUT;

    fn formed(set: &mut MemberSet<ZooKeeper>) -> bool {
        modes(set).iter().all(Option::is_some) && Self::agreed_leader(set).is_some()
    }

    fn serves(set: &MemberSet<ZooKeeper>, i: usize) -> bool {
        srvr(set.client_port(i)).as_deref().and_then(mode).is_some()
    }

    const LEADER_TIMEOUT: Duration = LEADER_TIMEOUT;

    /// The running leader, if every running server that answers serves
    /// and exactly one of them leads.
    fn agreed_leader(set: &MemberSet<ZooKeeper>) -> Option<usize> {
        let replies = replies(set);
        let answers = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, mode(r.as_ref()?))));
        let modes: Vec<(usize, &str)> = answers.map(|(i, m)| Some((i, m?))).collect::<Option<_>>()?;
        let leaders: Vec<usize> = modes
            .iter()
            .filter(|(_, m)| matches!(*m, "leader" | "standalone"))
            .map(|(i, _)| *i)
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    }

    const GROUP: &'static str = "ZooKeeper ensemble";
    const MEMBER: &'static str = "ZooKeeper server";
    const PREFIX: &'static str = "s";
    const KIND: &'static str = "zk";

    fn describe(set: &MemberSet<ZooKeeper>) -> String {
        format!("modes: {:?}", modes(set))
    }
}

/// What each server's `srvr` says its mode is (`None`: not running, no
/// answer, or not serving).
fn modes(set: &MemberSet<ZooKeeper>) -> Vec<Option<String>> {
    let replies = replies(set);
    replies
        .iter()
        .map(|r| mode(r.as_ref()?).map(str::to_owned))
        .collect()
}

/// Each server's reply to `srvr` (`None`: not running or no answer).
fn replies(set: &MemberSet<ZooKeeper>) -> Vec<Option<String>> {
    (0..set.len())
        .map(|i| set.is_running(i).then(|| srvr(set.client_port(i))).flatten())
        .collect()
}

/// Server `i`'s `zoo.cfg`. With one server there are no `server.N` lines,
/// and ZooKeeper runs standalone.
fn config(set: &MemberSet<ZooKeeper>, i: usize) -> String {
    let mut config = format!(
        "tickTime={TICK_MS}\ninitLimit={INIT_LIMIT_TICKS}\nsyncLimit={SYNC_LIMIT_TICKS}\n\
         dataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
         maxSessionTimeout={MAX_SESSION_MS}\nadmin.enableServer=false\n\
         4lw.commands.whitelist=*\n",
        set.path(i, "").display(),
        set.client_port(i)
    );
    // Unless durable, no fsync per transaction: a SIGKILLed server's
    // writes survive in the page cache, and fsyncs cost seconds on a
    // slow CI disk.
    if !set.store.durable {
        config.push_str("forceSync=no\n");
    }
    if set.len() > 1 {
        for j in 0..set.len() {
            let (id, peer, election) = (j + 1, set.ports(j)[1], set.ports(j)[2]);
            config.push_str(&format!("server.{id}=127.0.0.1:{peer}:{election}\n"));
        }
    }
    config
}

/// The reply to the four-letter word `srvr` on `port`, or `None` when the
/// server does not answer within the probe timeout.
fn srvr(port: u16) -> Option<String> {
    let ask = || -> io::Result<String> {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut stream = TcpStream::connect_timeout(&address, PROBE_TIMEOUT)?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        stream.write_all(b"srvr")?;
        // The server closes the connection after its reply.
        let mut reply = String::new();
        stream.read_to_string(&mut reply)?;
        Ok(reply)
    };
    ask().ok()
}

/// The `Mode:` line of a `srvr` reply (`leader`, `follower`,
/// `standalone`), or `None` when the server does not serve (it says
/// "This ZooKeeper instance is not currently serving requests" while it
/// looks for a leader or syncs with one).
fn mode(reply: &str) -> Option<&str> {
    Some(reply.lines().find_map(|l| l.strip_prefix("Mode: "))?.trim())
}
