//! Local Sentinel setups for tests: one master, its replicas
//! (`--replicaof`) and sentinels (`redis-server <conf> --sentinel`)
//! watching it, all on free loopback ports, killed and reaped when dropped.
//! Like [`crate::server`], everything here blocks (std only, no runtime).
//!
//! Data nodes are numbered `0..=replicas`: node 0 is the first master,
//! the others its replicas. Roles change on a failover; indexes do not.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::members::{free_ports, poll};
use crate::pause::Paused;
use crate::redis_proc::{Proc, fresh_dir, info_field, path_str, probe};
use crate::server::{Persistence, RedisServer};

/// The name the sentinels monitor the master under.
const MASTER_NAME: &str = "quorumlock";

/// `down-after-milliseconds`: how long the master may not answer before a
/// sentinel thinks it down. Sentinel's default (30 s) is tuned for real
/// networks; with this, a failover starts a second or two after a kill.
/// Not shorter: a sentinel fsyncs its conf on every change, and on a slow
/// disk that stalls it long enough to think a just-promoted master down
/// (a second failover followed the first now and then: with 500 ms on a
/// machine running one test binary, with 1 s on one running two test
/// binaries beside a build).
const DOWN_AFTER_MS: u32 = 2000;

/// `failover-timeout` in milliseconds. Sentinel's default (3 min) also
/// bounds how long a failed election (a split vote) waits before the next
/// try (twice this), which a test cannot wait for.
const FAILOVER_TIMEOUT_MS: u32 = 1000;

/// How long the sentinels may take to know the master, its replicas and
/// each other: sentinels find each other through hello messages sent every
/// 2 s, and after a failover each replica resynchronises with the new
/// master (a fork and a full copy); with room for a machine loaded by
/// parallel test binaries. Only a failing test waits it out.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(45);

/// How long a failover may take after the master was killed: the down
/// period, the sentinels agreeing it is down (asked every second), an
/// election (retried after a split vote) and the promotion.
const FAILOVER_LIMIT: Duration = Duration::from_secs(20);

/// How many fresh ports to try for a sentinel when another process takes
/// its port between finding it free and the sentinel binding it.
const PORT_ATTEMPTS: usize = 5;

/// A master, its replicas and sentinels on 127.0.0.1.
#[derive(Debug)]
pub struct SentinelSetup {
    dir: PathBuf,
    data: Vec<RedisServer>,
    sentinels: Vec<Proc>,
}

impl SentinelSetup {
    /// Starts a master with `replicas` replicas (each synced before the
    /// next) and `sentinels` sentinels (quorum: a majority of them), and
    /// waits until every sentinel knows the master, every replica and every
    /// other sentinel; panics with the logs when it cannot.
    pub fn start(replicas: usize, sentinels: usize) -> SentinelSetup {
        assert!(sentinels > 0, "a sentinel setup needs at least one sentinel");
        // A promoted replica syncs the others at once, not after 5 s.
        let no_delay = ["--repl-diskless-sync-delay", "0"];
        let master = RedisServer::start_with(Persistence::None, &no_delay);
        let master_port = master.port().to_string();
        let mut data = vec![master];
        for _ in 0..replicas {
            let args = [&no_delay[..], &["--replicaof", "127.0.0.1", &master_port]].concat();
            let replica = RedisServer::start_with(Persistence::None, &args);
            replica.wait_for_master_link(&data[0]);
            data.push(replica);
        }
        let dir = fresh_dir("redis-sentinel").unwrap_or_else(|e| panic!("sentinel dir: {e}"));
        let mut setup = SentinelSetup {
            dir,
            data,
            sentinels: Vec::new(),
        };
        let quorum = sentinels / 2 + 1;
        for _ in 0..sentinels {
            let sentinel = setup
                .start_sentinel(quorum)
                .unwrap_or_else(|e| panic!("sentinel: {e}"));
            setup.sentinels.push(sentinel);
        }
        setup.wait_for_sentinels();
        setup
    }

    /// The name the sentinels know the master by.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,.../<name>`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// The port of each sentinel.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The port of each data node (node 0 the first master).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisServer::port).collect()
    }

    /// Data node `i` (for its commands, URL, log).
    pub fn data_node(&self, i: usize) -> &RedisServer {
        &self.data[i]
    }

    /// The master's port as the first answering sentinel says it
    /// (`SENTINEL get-master-addr-by-name`); panics when none answers.
    pub fn master_port(&self) -> u16 {
        let ports = self.sentinels.iter().filter(|s| s.is_running());
        ports
            .filter_map(|s| self.master_addr(s.port))
            .next()
            .unwrap_or_else(|| panic!("no sentinel names a master\n{}", self.logs()))
    }

    /// The index of the data node the sentinels name as the master.
    pub fn master_index(&self) -> usize {
        let port = self.master_port();
        self.data_ports()
            .iter()
            .position(|&p| p == port)
            .unwrap_or_else(|| panic!("the sentinels name port {port}, no data node of this setup"))
    }

    /// Kills the master and waits until every running sentinel names
    /// another, running data node that says it is a master, and until they
    /// know the other running replicas as its replicas
    /// ([`SentinelSetup::wait_for_sentinels`]); returns its port, or panics
    /// with the logs when that does not happen in time.
    pub fn kill_master_and_wait_for_failover(&mut self) -> u16 {
        let old = self.master_index();
        self.data[old].kill();
        let old_port = self.data[old].port();
        let new = poll(FAILOVER_LIMIT, || {
            let port = self.agreed_master()?;
            let i = self.data_ports().iter().position(|&p| p == port)?;
            (port != old_port && self.data[i].is_running() && self.role(i) == "master").then_some(port)
        });
        let new = new.unwrap_or_else(|| {
            panic!(
                "the sentinels did not fail over from port {old_port} within {FAILOVER_LIMIT:?}\n{}",
                self.logs()
            )
        });
        self.wait_for_sentinels();
        new
    }

    /// Waits (polling) until every running sentinel agrees on the master,
    /// knows every running data node but the master as its replica (not
    /// down) and every other running sentinel; panics with the logs when
    /// that does not happen in time.
    pub fn wait_for_sentinels(&self) {
        let mut why = String::new();
        let known = poll(DISCOVERY_TIMEOUT, || match self.discovery() {
            Ok(()) => Some(()),
            Err(reason) => {
                why = reason;
                None
            }
        });
        if known.is_none() {
            panic!(
                "sentinels incomplete after {DISCOVERY_TIMEOUT:?}: {why}\n{}",
                self.logs()
            );
        }
    }

    /// SIGKILLs data node `i` and reaps it; its port is held until a
    /// restart. Idempotent.
    pub fn kill(&mut self, i: usize) {
        self.data[i].kill();
    }

    /// Kills data node `i` if it runs and starts it again on the same port,
    /// empty (no persistence), then, unless the sentinels name it the
    /// master, makes it a replica of the current master (`REPLICAOF`) and
    /// waits until the sentinels know it as one. The sentinels would do the
    /// same to a former master, but only after it has said it is a master
    /// for 8 s; the restarted node still says so for a moment.
    pub fn restart(&mut self, i: usize) {
        self.data[i].restart();
        let master = self.master_port();
        if master != self.data[i].port() {
            let reply = self.data[i].command(&["REPLICAOF", "127.0.0.1", &master.to_string()]);
            let reply = reply.unwrap_or_else(|e| panic!("REPLICAOF on data node {i}: {e}"));
            assert!(reply.starts_with("+OK"), "REPLICAOF on data node {i}: {reply:?}");
        }
        self.wait_for_sentinels();
    }

    /// Freezes data node `i` with SIGSTOP until the guard is dropped.
    pub fn pause(&self, i: usize) -> Paused {
        self.data[i].pause()
    }

    /// Whether data node `i` has been started and not killed.
    pub fn is_running(&self, i: usize) -> bool {
        self.data[i].is_running()
    }

    /// Data node `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        self.data[i].log()
    }

    /// Sentinel `j`'s log so far (its `+sdown`, `+switch-master` events).
    pub fn sentinel_log(&self, j: usize) -> String {
        self.sentinels[j].log()
    }

    /// The sentinels' view of the master (`SENTINEL MASTER`) from sentinel
    /// `j`: field name to value (`num-slaves`, `flags`, ...); empty when it
    /// does not answer.
    pub fn sentinel_master_info(&self, j: usize) -> HashMap<String, String> {
        let port = self.sentinels[j].port;
        let flat: Vec<String> = probe(port, &["SENTINEL", "MASTER", MASTER_NAME]).unwrap_or_default();
        pairs(&flat)
    }

    /// Writes a conf file for a new sentinel on a fresh port and starts it.
    fn start_sentinel(&self, quorum: usize) -> io::Result<Proc> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_ports(1)?[0];
            let dir = self.dir.join(format!("sentinel-{port}"));
            let conf = dir.join("sentinel.conf");
            let mut sentinel = Proc::new(
                port,
                Vec::new(),
                dir.clone(),
                vec![path_str(&conf), "--sentinel".into()],
            )?;
            std::fs::write(&conf, self.sentinel_conf(port, &dir, quorum))?;
            match sentinel.spawn() {
                Ok(()) => return Ok(sentinel),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// A sentinel's conf (sentinels rewrite theirs as they learn).
    fn sentinel_conf(&self, port: u16, dir: &std::path::Path, quorum: usize) -> String {
        let master = self.data[0].port();
        let replicas = self.data.len().saturating_sub(1).max(1);
        format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir \"{}\"\n\
             logfile \"{}\"\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master} {quorum}\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {MASTER_NAME} {replicas}\n",
            path_str(dir),
            crate::redis_proc::LOG_FILE
        )
    }

    /// Why the sentinels do not know the setup yet, if they do not (see
    /// [`SentinelSetup::wait_for_sentinels`]).
    fn discovery(&self) -> Result<(), String> {
        let master = self
            .agreed_master()
            .ok_or("the sentinels do not agree on a master")?;
        let running: Vec<&Proc> = self.sentinels.iter().filter(|s| s.is_running()).collect();
        let mut replicas: Vec<u16> = self
            .data
            .iter()
            .filter(|d| d.is_running())
            .map(|d| d.port())
            .collect();
        replicas.retain(|&p| p != master);
        replicas.sort_unstable();
        for sentinel in &running {
            let port = sentinel.port;
            let flat: Vec<String> = probe(port, &["SENTINEL", "MASTER", MASTER_NAME]).unwrap_or_default();
            let info = pairs(&flat);
            let others = info
                .get("num-other-sentinels")
                .and_then(|n| n.parse::<usize>().ok());
            if info.get("flags").map(String::as_str) != Some("master") || others != Some(running.len() - 1) {
                return Err(format!("sentinel {port} sees the master as {info:?}"));
            }
            let listed: Vec<Vec<String>> =
                probe(port, &["SENTINEL", "REPLICAS", MASTER_NAME]).unwrap_or_default();
            let mut known: Vec<u16> = listed
                .iter()
                .map(|r| pairs(r))
                .filter(|r| r.get("flags").map(String::as_str) == Some("slave"))
                .filter(|r| r.get("master-link-status").map(String::as_str) == Some("ok"))
                .filter(|r| r.get("master-port").and_then(|p| p.parse().ok()) == Some(master))
                .filter_map(|r| r.get("port")?.parse().ok())
                .collect();
            known.sort_unstable();
            known.retain(|p| replicas.contains(p));
            if known != replicas {
                return Err(format!(
                    "sentinel {port} knows replicas {known:?} of {replicas:?}"
                ));
            }
        }
        Ok(())
    }

    /// The master port every running sentinel names, if they agree.
    fn agreed_master(&self) -> Option<u16> {
        let mut agreed = None;
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            let port = self.master_addr(sentinel.port)?;
            if agreed.is_some_and(|a| a != port) {
                return None;
            }
            agreed = Some(port);
        }
        agreed
    }

    /// The master port sentinel `port` names.
    fn master_addr(&self, port: u16) -> Option<u16> {
        let addr: Vec<String> = probe(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?;
        addr.get(1)?.parse().ok()
    }

    /// Data node `i`'s `role` from `INFO replication` (empty when it does
    /// not answer).
    fn role(&self, i: usize) -> String {
        let info: String = probe(self.data[i].port(), &["INFO", "replication"]).unwrap_or_default();
        info_field(&info, "role").unwrap_or_default().to_owned()
    }

    /// Every process's log, for failure messages.
    fn logs(&self) -> String {
        let data = self
            .data
            .iter()
            .enumerate()
            .map(|(i, d)| format!("--- data node {i}, port {}:\n{}", d.port(), d.log()));
        let sentinels = self
            .sentinels
            .iter()
            .enumerate()
            .map(|(j, s)| format!("--- sentinel {j}, port {}:\n{}", s.port, s.log()));
        data.chain(sentinels).collect::<Vec<_>>().join("\n")
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        // The sentinels first, so that none reconfigures a dying node; the
        // data nodes clean up after themselves.
        for sentinel in &mut self.sentinels {
            sentinel.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A flat `[name, value, name, value, ...]` reply as a map.
fn pairs(flat: &[String]) -> HashMap<String, String> {
    flat.chunks(2)
        .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
        .collect()
}
