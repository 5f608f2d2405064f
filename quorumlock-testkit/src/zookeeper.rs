//! Local ZooKeeper ensembles for tests: N servers (Debian's `zookeeper`
//! package, 3.8) on free loopback ports, in a temporary directory of their
//! own, killed and reaped when dropped. Like [`crate::etcd`], everything
//! blocks (std only). Servers are watched with the four-letter word `srvr`
//! over plain TCP; [`ZkEnsemble::children`] reads znodes through kazoo.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::etcd::{free_ports, poll};
use crate::server::{Paused, hold_port};

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

/// How many fresh sets of ports to try when another process takes one of
/// ours between finding it free and a server binding it.
const PORT_ATTEMPTS: usize = 5;

/// Lists the children of `argv[2]` on the ensemble `argv[1]`, one per line.
const CHILDREN_SCRIPT: &str = include_str!("zookeeper_children.py");

/// One server of the ensemble.
#[derive(Debug, Default)]
struct Server {
    client_port: u16,
    /// Followers connect to the leader here.
    peer_port: u16,
    /// Leader election runs over this one.
    election_port: u16,
    child: Option<Child>,
    /// While the server is killed, its ports bound but not listening:
    /// refused as by a dead process (so that the others' election does not
    /// wait for a connect timeout), and handed to no other process.
    port_holds: Vec<tokio::net::TcpSocket>,
}

/// N ZooKeeper server processes on 127.0.0.1, forming one ensemble (or a
/// standalone server when N is 1).
#[derive(Debug)]
pub struct ZkEnsemble {
    dir: PathBuf,
    servers: Vec<Server>,
    /// Every transaction fsynced before it is acknowledged, as in
    /// production ([`ZkEnsemble::start_durable`]).
    durable: bool,
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
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut ensemble = Self::fresh(servers).unwrap_or_else(|e| panic!("ZooKeeper ensemble: {e}"));
            ensemble.durable = durable;
            match ensemble.boot() {
                Ok(()) => return ensemble,
                // Someone took one of the ports in the meantime: try others.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{}", last_error.expect("at least one attempt"));
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,...`: the client ports of all servers.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: the connect string of ZooKeeper's
    /// clients (kazoo, zkCli).
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect();
        hosts.join(",")
    }

    /// The client port of server `i` (kept across restarts).
    pub fn client_port(&self, i: usize) -> u16 {
        self.servers[i].client_port
    }

    /// The number of servers, running or not.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// The index of the leader (or the standalone server), waiting
    /// (polling) up to a few seconds until every running server that
    /// answers `srvr` serves and exactly one of them leads, e.g. during an
    /// election; panics with the logs when they do not. A paused server
    /// does not answer and is left out, so with a paused leader this waits
    /// until the others have elected a new one.
    pub fn leader(&self) -> usize {
        poll(LEADER_TIMEOUT, || self.agreed_leader()).unwrap_or_else(|| {
            panic!(
                "ZooKeeper servers never agreed on a running leader; modes: {:?}\n{}",
                self.modes(),
                self.logs()
            )
        })
    }

    /// SIGKILLs server `i` and reaps it (a crash); its data dir stays, and
    /// its ports are held until a restart. Idempotent.
    pub fn kill(&mut self, i: usize) {
        let server = &mut self.servers[i];
        if let Some(mut child) = server.child.take() {
            // A SIGSTOPped process dies on SIGKILL too.
            let _ = child.kill();
            let _ = child.wait();
            let ports = [server.client_port, server.peer_port, server.election_port];
            server.port_holds = ports.into_iter().filter_map(hold_port).collect();
        }
    }

    /// Kills server `i` if it runs and starts it again with the same id,
    /// ports and data dir, then waits until it serves again and the
    /// running servers agree on a leader; panics with its log when it does
    /// not.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i).unwrap_or_else(|e| panic!("ZooKeeper s{i}: {e}"));
        let mut exited = None;
        let rejoined = poll(STARTUP_TIMEOUT, || {
            exited = self.exited(i);
            let serves = srvr(self.client_port(i)).as_deref().and_then(mode).is_some();
            (exited.is_some() || serves && self.agreed_leader().is_some()).then_some(())
        });
        if rejoined.is_none() || exited.is_some() {
            let why = exited.map_or("did not rejoin".into(), |e| format!("exited ({e})"));
            panic!("ZooKeeper s{i} {why} after a restart; log:\n{}", self.log(i));
        }
    }

    /// Freezes server `i` with SIGSTOP until the returned guard is dropped
    /// (SIGCONT). While frozen, connects succeed but requests hang, and
    /// the others stop hearing from it.
    pub fn pause(&self, i: usize) -> Paused {
        Paused::stop(self.pids()[i].unwrap_or_else(|| panic!("pause: ZooKeeper server s{i} is not running")))
    }

    /// Whether server `i` has been started and not killed (a paused server
    /// is running).
    pub fn is_running(&self, i: usize) -> bool {
        self.servers[i].child.is_some()
    }

    /// Server `i`'s log so far (the JVM's stdout and stderr, across
    /// restarts).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(i)).unwrap_or_default()
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
            .unwrap_or_else(|e| panic!("children of {path:?}: python3: {}", with_install_hint(e)));
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let hint = match stderr.contains("No module named 'kazoo'") {
                true => ZOOKEEPER_INSTALL_HINT,
                false => "",
            };
            panic!(
                "children of {path:?} failed ({}): {hint}\n{stderr}\n{}",
                output.status,
                self.logs()
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

    /// The process id of each server, while it runs.
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.servers
            .iter()
            .map(|s| s.child.as_ref().map(Child::id))
            .collect()
    }

    /// An ensemble of `n` servers on fresh ports and a fresh directory,
    /// none of them started yet.
    fn fresh(n: usize) -> io::Result<ZkEnsemble> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        if let Some(jar) = CLASSPATH.split(':').find(|jar| !Path::new(jar).exists()) {
            let message = format!("{jar} is missing; {ZOOKEEPER_INSTALL_HINT}");
            return Err(io::Error::new(io::ErrorKind::NotFound, message));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}-{count}-{nanos}", std::process::id());
        let dir = std::env::temp_dir().join(format!("quorumlock-zk-{unique}"));
        let ports = free_ports(3 * n)?;
        let servers = ports
            .chunks(3)
            .map(|p| Server {
                client_port: p[0],
                peer_port: p[1],
                election_port: p[2],
                ..Server::default()
            })
            .collect();
        Ok(ZkEnsemble {
            dir,
            servers,
            durable: false,
        })
    }

    /// Spawns every server and waits until all of them serve with one
    /// leader; `AddrInUse` when a server lost one of its ports.
    fn boot(&mut self) -> io::Result<()> {
        for i in 0..self.len() {
            self.spawn(i)?;
        }
        let mut exited = None;
        let booted = poll(STARTUP_TIMEOUT, || {
            exited = (0..self.len()).find_map(|i| self.exited(i).map(|e| (i, e)));
            let all_serve = self.modes().iter().all(Option::is_some);
            (exited.is_some() || all_serve && self.agreed_leader().is_some()).then_some(())
        });
        if booted.is_some() && exited.is_none() {
            return Ok(());
        }
        let why = exited.map_or("no leader in time".into(), |(i, e)| format!("s{i} exited ({e})"));
        let logs = self.logs();
        // A server that lost one of its ports to another process (Java's
        // BindException).
        let kind = match logs.contains("Address already in use") {
            true => io::ErrorKind::AddrInUse,
            false => io::ErrorKind::Other,
        };
        let message = format!(
            "ZooKeeper ensemble did not start: {why}; modes: {:?}\n{logs}",
            self.modes()
        );
        Err(io::Error::new(kind, message))
    }

    /// The running leader, if every running server that answers serves
    /// and exactly one of them leads.
    fn agreed_leader(&self) -> Option<usize> {
        let replies = self.replies();
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

    /// What each server's `srvr` says its mode is (`None`: not running, no
    /// answer, or not serving).
    fn modes(&self) -> Vec<Option<String>> {
        let replies = self.replies();
        replies
            .iter()
            .map(|r| mode(r.as_ref()?).map(str::to_owned))
            .collect()
    }

    /// Each server's reply to `srvr` (`None`: not running or no answer).
    fn replies(&self) -> Vec<Option<String>> {
        (0..self.len())
            .map(|i| self.is_running(i).then(|| srvr(self.client_port(i))).flatten())
            .collect()
    }

    /// Writes server `i`'s configuration and id (ZooKeeper's ids are
    /// 1-based) and starts its process (without waiting for it).
    fn spawn(&mut self, i: usize) -> io::Result<()> {
        std::fs::create_dir_all(self.data_dir(i))?;
        std::fs::write(self.data_dir(i).join("myid"), format!("{}\n", i + 1))?;
        let config_path = self.dir.join(format!("s{i}.cfg"));
        std::fs::write(&config_path, self.config(i))?;
        // Appended, so that a restarted server's log follows its earlier life.
        let log = File::options().append(true).create(true).open(self.log_path(i))?;
        let child = Command::new("java")
            .args(JVM_FLAGS.split_whitespace())
            .args(["-cp", CLASSPATH])
            .arg(MAIN_CLASS)
            .arg(&config_path)
            // Anything the JVM writes beside its data lands in the ensemble's dir.
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(with_install_hint)?;
        self.servers[i].port_holds.clear();
        self.servers[i].child = Some(child);
        Ok(())
    }

    /// Server `i`'s `zoo.cfg`. With one server there are no `server.N`
    /// lines, and ZooKeeper runs standalone.
    fn config(&self, i: usize) -> String {
        let mut config = format!(
            "tickTime={TICK_MS}\ninitLimit={INIT_LIMIT_TICKS}\nsyncLimit={SYNC_LIMIT_TICKS}\n\
             dataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             maxSessionTimeout={MAX_SESSION_MS}\nadmin.enableServer=false\n\
             4lw.commands.whitelist=*\n",
            self.data_dir(i).display(),
            self.client_port(i)
        );
        // Unless durable, no fsync per transaction: a SIGKILLed server's
        // writes survive in the page cache, and fsyncs cost seconds on a
        // slow CI disk.
        if !self.durable {
            config.push_str("forceSync=no\n");
        }
        if self.len() > 1 {
            for (j, s) in self.servers.iter().enumerate() {
                let (id, peer, election) = (j + 1, s.peer_port, s.election_port);
                config.push_str(&format!("server.{id}=127.0.0.1:{peer}:{election}\n"));
            }
        }
        config
    }

    /// How server `i` ended, when its process has exited on its own.
    fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        self.servers[i].child.as_mut()?.try_wait().ok().flatten()
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("s{i}"))
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("s{i}.log"))
    }

    /// Every server's log, for failure messages.
    fn logs(&self) -> String {
        (0..self.len())
            .map(|i| format!("--- s{i}, port {}:\n{}", self.client_port(i), self.log(i)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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

/// `e`, or the install hint when the program was not found.
fn with_install_hint(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, ZOOKEEPER_INSTALL_HINT),
        _ => e,
    }
}
