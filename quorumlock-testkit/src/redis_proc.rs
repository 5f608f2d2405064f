//! What [`crate::redis_cluster`] and [`crate::sentinel`] share: one
//! `redis-server` process (a cluster node or a sentinel) with its own
//! directory and ports, started and waited for, killed and reaped, and
//! commands to a port over a fresh connection with a short timeout.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) use crate::server::fresh_dir;
use crate::server::{hold_port, spawn};

/// How long a spawned process may take to answer PING. Generous, for a
/// loaded CI machine running many tests at once.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one probe (connect, or wait for a reply) may take. Short: a
/// SIGSTOPped node accepts connections (the kernel does) but never
/// answers, and must not hold up a poll of the others for long.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long an administrative command (a `MIGRATE` of a batch of keys, a
/// `CLUSTER SETSLOT`) may take to answer.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one command to the server on 127.0.0.1:`port` over a fresh
/// connection, waiting at most `timeout` for the connect and the reply.
pub(crate) fn query_within<T: redis::FromRedisValue>(
    port: u16,
    timeout: Duration,
    args: &[&str],
) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut conn)
}

/// [`query_within`] with the probe timeout: for polls.
pub(crate) fn probe<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> Option<T> {
    query_within(port, PROBE_TIMEOUT, args).ok()
}

/// One `redis-server` child process on 127.0.0.1: a cluster node or a
/// sentinel.
#[derive(Debug)]
pub(crate) struct Proc {
    /// The port it serves clients on (kept across restarts).
    pub(crate) port: u16,
    /// Other ports it binds (a cluster node's bus port), held with the
    /// client port while it is killed.
    pub(crate) other_ports: Vec<u16>,
    /// Its own directory (working dir, log, `nodes.conf` or sentinel conf).
    pub(crate) dir: PathBuf,
    /// The arguments to `redis-server` (the directory is its `--dir`, or
    /// the conf file's `dir`).
    args: Vec<String>,
    child: Option<Child>,
    /// While the process is killed, its ports bound but not listening:
    /// refused as by a dead process, and handed to no other process.
    port_holds: Vec<tokio::net::TcpSocket>,
}

impl Proc {
    /// A process to be started with `args` in directory `dir` (created
    /// here); not started yet.
    pub(crate) fn new(port: u16, other_ports: Vec<u16>, dir: PathBuf, args: Vec<String>) -> io::Result<Proc> {
        std::fs::create_dir_all(&dir)?;
        Ok(Proc {
            port,
            other_ports,
            dir,
            args,
            child: None,
            port_holds: Vec::new(),
        })
    }

    /// The process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it has been started and not killed.
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Its log so far (`redis.log` in its directory).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default()
    }

    /// SIGKILLs and reaps the process, and holds its ports until a
    /// restart. Idempotent.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A SIGSTOPped process dies on SIGKILL too.
            let _ = child.kill();
            let _ = child.wait();
            let ports = std::iter::once(self.port).chain(self.other_ports.iter().copied());
            self.port_holds = ports.filter_map(hold_port).collect();
        }
    }

    /// Starts the process and waits until it answers PING as itself;
    /// `AddrInUse` when another process has one of its ports.
    pub(crate) fn spawn(&mut self) -> io::Result<()> {
        self.port_holds.clear();
        let child = spawn(
            Command::new("redis-server")
                .args(&self.args)
                .current_dir(&self.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        let pid = child.id();
        self.child = Some(child);
        let started = Instant::now();
        loop {
            // Ours only when the process on the port is: another test
            // binary may have started a server there in the meantime.
            let info: Option<String> = probe(self.port, &["INFO", "server"]);
            match info.as_deref().and_then(process_id) {
                Some(answering) if answering == pid => return Ok(()),
                Some(_) => {
                    self.kill();
                    let message = format!("port {} belongs to another redis-server", self.port);
                    return Err(io::Error::new(io::ErrorKind::AddrInUse, message));
                }
                None => {}
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > STARTUP_TIMEOUT {
                self.kill();
                let log = self.log();
                let kind = match log.contains("Address already in use") {
                    true => io::ErrorKind::AddrInUse,
                    false => io::ErrorKind::Other,
                };
                let why = exited.map_or("no answer in time".to_string(), |s| s.to_string());
                let message = format!(
                    "redis-server on port {} did not start ({why}); log:\n{log}",
                    self.port
                );
                return Err(io::Error::new(kind, message));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The log file name in each process's directory.
pub(crate) const LOG_FILE: &str = "redis.log";

/// `dir` as a string for a conf file or an argument.
pub(crate) fn path_str(dir: &Path) -> String {
    dir.to_string_lossy().into_owned()
}

/// The `process_id` of an `INFO server` reply.
fn process_id(info: &str) -> Option<u32> {
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// The value of `field` in an `INFO`-style reply (`field:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}
