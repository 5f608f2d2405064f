//! Local `redis-server` processes for tests and for `quorumlock demo`.
//!
//! Each server listens on a free loopback port, lives in its own temporary
//! directory (a node started with `--save ""` still loads a `dump.rdb` left
//! in its dir), and is killed and reaped when dropped. Everything here
//! blocks (std only, no runtime), so that it works outside a tokio runtime
//! and from a schedule's blocking thread alike.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::pause::Paused;

/// How long a server may take to answer PING after it was spawned.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many fresh ports to try when another process takes ours between
/// finding it free and the server binding it.
const PORT_ATTEMPTS: usize = 5;

/// What to tell a user whose machine has no `redis-server`.
pub const INSTALL_HINT: &str = "redis-server was not found on PATH; install it with \
     `sudo apt-get install -y redis-server` (Debian/Ubuntu), `sudo dnf install redis` (Fedora) \
     or `brew install redis` (macOS)";

/// How a server keeps its data across a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing survives a restart (`--save "" --appendonly no`).
    None,
    /// Every write is fsynced to the AOF before the reply
    /// (`--appendonly yes --appendfsync always`): keys and their absolute
    /// expiry survive a SIGKILL.
    AofAlways,
}

/// One `redis-server` child process on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    persistence: Persistence,
    extra_args: Vec<String>,
    /// Extra environment variables for the process (e.g. `LD_PRELOAD` for
    /// the clock-skew shim), applied again on every restart.
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// While the server is killed, a socket bound to its port but not
    /// listening: connections are refused, as by a dead process, and no
    /// other process (a test binary running beside this one) is handed the
    /// port for a server of its own, which would answer in the dead node's
    /// place.
    port_hold: Option<tokio::net::TcpSocket>,
}

impl RedisServer {
    /// Starts a server without persistence, panicking with a clear message
    /// (and the server log) when it cannot.
    pub fn start() -> RedisServer {
        Self::start_with(Persistence::None, &[])
    }

    /// Starts a server with the given persistence and extra arguments
    /// (`["--maxmemory", "1mb"]`), panicking when it cannot.
    pub fn start_with(persistence: Persistence, extra_args: &[&str]) -> RedisServer {
        Self::try_start(persistence, extra_args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server, or explains why it could not.
    pub fn try_start(persistence: Persistence, extra_args: &[&str]) -> io::Result<RedisServer> {
        Self::try_start_env(persistence, extra_args, &[])
    }

    /// Like [`RedisServer::start_with`], with extra environment variables
    /// for the process (kept for restarts), panicking when it cannot start.
    pub fn start_env(persistence: Persistence, extra_args: &[&str], env: &[(&str, String)]) -> RedisServer {
        Self::try_start_env(persistence, extra_args, env).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server with extra environment variables, or explains why it
    /// could not.
    pub fn try_start_env(
        persistence: Persistence,
        extra_args: &[&str],
        env: &[(&str, String)],
    ) -> io::Result<RedisServer> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let mut server = RedisServer {
                port: free_port()?,
                dir: fresh_dir("redis")?,
                persistence,
                extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
                env: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
                child: None,
                port_hold: None,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                // Someone took the port in the meantime: try another one.
                Err(e)
                    if e.kind() == io::ErrorKind::AddrInUse
                        || server.log().contains("Address already in use") =>
                {
                    last_error = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// The port the server listens on (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The process id, while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's directory (log, AOF, RDB).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the process has been started and not killed.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// SIGKILL and reap the process (a crash: nothing is flushed), and hold
    /// its port until a restart. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A SIGSTOPped process dies on SIGKILL too.
            let _ = child.kill();
            let _ = child.wait();
            self.port_hold = hold_port(self.port);
        }
    }

    /// Kills the server if it runs and starts it again on the same port and
    /// directory (with AOF persistence its keys come back).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Freezes the process with SIGSTOP until the returned guard is dropped
    /// (SIGCONT). While frozen, connects succeed but replies hang.
    pub fn pause(&self) -> Paused {
        Paused::stop(self.pid().expect("pause: server is not running"))
    }

    /// Starts a replica of `master` (`--replicaof`, no persistence) and waits
    /// until both sides see the link up, panicking when they do not. Sets
    /// the master's `repl-diskless-sync-delay` to 0 first: by default a
    /// master waits 5 s for more replicas before the initial sync.
    pub fn start_replica_of(master: &RedisServer) -> RedisServer {
        let reply = master
            .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
            .expect("CONFIG SET on the master");
        assert!(reply.starts_with("+OK"), "CONFIG SET: {reply:?}");
        let port = master.port().to_string();
        let replica = Self::start_with(Persistence::None, &["--replicaof", "127.0.0.1", &port]);
        replica.wait_for_master_link(master);
        replica
    }

    /// Waits until this replica reports `master_link_status:up` and
    /// acknowledges `master`'s writes (a write followed by `WAIT` on one
    /// connection counts every online replica), panicking after the startup
    /// timeout. The link being up is not enough for `WAIT`: after a diskless
    /// initial sync the master starts streaming to a replica only on its
    /// first periodic acknowledgement, up to a second later.
    pub fn wait_for_master_link(&self, master: &RedisServer) {
        const PROBE: &str = "quorumlock-harness:replica-probe";
        let started = Instant::now();
        let online = format!("port={},state=online", self.port);
        loop {
            let info = self.command(&["INFO", "replication"]).unwrap_or_default();
            let master_info = master.command(&["INFO", "replication"]).unwrap_or_default();
            if info.contains("master_link_status:up") && master_info.contains(&online) {
                let replicas = master_info.matches(",state=online,").count().to_string();
                let acked = master
                    .pipeline(&[&["SET", PROBE, "1"], &["DEL", PROBE], &["WAIT", &replicas, "100"]])
                    .unwrap_or_default();
                if acked.last() == Some(&format!(":{replicas}\r\n")) {
                    return;
                }
            }
            assert!(
                started.elapsed() < STARTUP_TIMEOUT,
                "replica on port {} never came online; its INFO: {info}\nthe master's: \
                 {master_info}\nlog:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends one command over a fresh connection and returns the raw reply
    /// (RESP), e.g. `server.command(&["DBSIZE"])` gives `":0\r\n"`.
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
        stream.set_read_timeout(Some(STARTUP_TIMEOUT))?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes())?;
        let mut reply = Vec::new();
        let mut buf = [0u8; 4096];
        // Replies used here are small; read until a complete line arrived.
        loop {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
            if reply_len(&reply).is_some() {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&reply).into_owned())
    }

    /// Sends several commands over one fresh connection (what `WAIT` needs:
    /// it waits for the writes of its own connection) and returns their raw
    /// replies, of the simple kinds (status, error, integer, bulk string).
    pub fn pipeline(&self, commands: &[&[&str]]) -> io::Result<Vec<String>> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
        stream.set_read_timeout(Some(STARTUP_TIMEOUT))?;
        let mut request = String::new();
        for args in commands {
            request.push_str(&format!("*{}\r\n", args.len()));
            for arg in *args {
                request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
        }
        stream.write_all(request.as_bytes())?;
        let mut received = Vec::new();
        let mut replies = Vec::new();
        let mut buf = [0u8; 4096];
        // Replies used here are small; read until each one is complete.
        while replies.len() < commands.len() {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                replies.push(String::from_utf8_lossy(&received).into_owned());
                break;
            }
            received.extend_from_slice(&buf[..n]);
            while let Some(len) = reply_len(&received) {
                replies.push(String::from_utf8_lossy(&received[..len]).into_owned());
                received.drain(..len);
            }
        }
        Ok(replies)
    }

    fn spawn(&mut self) -> io::Result<()> {
        self.port_hold = None;
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--protected-mode", "no"])
            .args(["--enable-debug-command", "local", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "redis.log"]);
        match self.persistence {
            Persistence::None => cmd.args(["--appendonly", "no"]),
            Persistence::AofAlways => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
        };
        cmd.args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = spawn(&mut cmd)?;
        let pid = child.id();
        self.child = Some(child);
        let started = Instant::now();
        loop {
            // Ready when PING answers (not during an AOF load) and the
            // server on the port is ours: another process (a second test
            // binary, a test runner that runs each test in a process of its
            // own) may have started one there between `free_port` and now,
            // and it answers while ours is still failing to bind.
            let replies = self
                .pipeline(&[&["PING"], &["INFO", "server"]])
                .unwrap_or_default();
            let pong = replies.first().is_some_and(|reply| reply.starts_with("+PONG"));
            match replies.get(1).and_then(|info| process_id(info)) {
                Some(answering) if answering != pid => {
                    self.kill();
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("port {} belongs to another redis-server", self.port),
                    ));
                }
                Some(_) if pong => return Ok(()),
                _ => {}
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > STARTUP_TIMEOUT {
                self.kill();
                return Err(io::Error::other(format!(
                    "redis-server on port {} did not start ({}); log:\n{}",
                    self.port,
                    exited.map_or("no PONG in time".to_string(), |s| s.to_string()),
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Freezes several servers with one SIGSTOP (one `kill` for all of them),
/// so that they stop within microseconds of each other, not one process
/// spawn apart. Each guard resumes its server when dropped.
pub fn pause_all<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> Vec<Paused> {
    let pids: Vec<u32> = servers
        .into_iter()
        .map(|s| s.pid().expect("pause: server is not running"))
        .collect();
    Paused::stop_all(&pids)
}

/// `n` servers without persistence.
pub fn start_nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// Nodes from `QUORUMLOCK_NODES` (comma separated), or `n` local servers
/// with AOF persistence started here (stopped when the returned servers are
/// dropped). For the examples and the demo.
pub fn nodes_from_env_or_local(n: usize) -> io::Result<(Vec<String>, Vec<RedisServer>)> {
    let given: Vec<String> = std::env::var("QUORUMLOCK_NODES")
        .unwrap_or_default()
        .split(',')
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    if !given.is_empty() {
        return Ok((given, Vec::new()));
    }
    let servers = (0..n)
        .map(|_| RedisServer::try_start(Persistence::AofAlways, &[]))
        .collect::<io::Result<Vec<_>>>()?;
    Ok((servers.iter().map(RedisServer::url).collect(), servers))
}

/// The URLs of `servers`.
pub fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

/// The `process_id` of an `INFO server` reply.
fn process_id(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// A port that was free a moment ago (the OS picks it when binding port 0).
/// A socket bound to `port` on loopback without listening, or `None` when
/// the port cannot be bound (then it is only as free as any closed port).
/// `SO_REUSEADDR`, so that the dead server's connections lingering in
/// TIME_WAIT do not stop the bind; a restart drops it before it binds.
pub(crate) fn hold_port(port: u16) -> Option<tokio::net::TcpSocket> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.set_reuseaddr(true).ok()?;
    socket.bind((Ipv4Addr::LOCALHOST, port).into()).ok()?;
    Some(socket)
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// A new empty directory under the system temp dir named after `kind`,
/// unique in this process and across processes.
pub(crate) fn fresh_dir(kind: &str) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "quorumlock-{kind}-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The length of the first complete RESP value in `reply`, of the simple
/// kinds used here (status, error, integer, bulk string; anything else is
/// taken as one line), or `None` while it is incomplete.
fn reply_len(reply: &[u8]) -> Option<usize> {
    let line_end = reply.windows(2).position(|w| w == b"\r\n")?;
    match reply.first() {
        Some(b'$') => {
            let len: i64 = std::str::from_utf8(&reply[1..line_end])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let total = if len < 0 {
                line_end + 2
            } else {
                line_end + 2 + len as usize + 2
            };
            (reply.len() >= total).then_some(total)
        }
        _ => Some(line_end + 2),
    }
}

/// Spawns `cmd` (a `redis-server`), saying how to install Redis when it is
/// not on PATH.
pub(crate) fn spawn(cmd: &mut Command) -> io::Result<std::process::Child> {
    cmd.spawn().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, INSTALL_HINT),
        _ => e,
    })
}
