//! The nodes every contender talks to: local `redis-server` processes (the
//! test kit's), optionally each behind a fault proxy (also the kit's) that
//! adds latency or swallows traffic.
//!
//! The proxies run on a runtime of their own, on its own thread, so that
//! they keep forwarding while a contender blocks its thread (redlock is
//! synchronous) and so that they load every contender alike.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::Duration;

use quorumlock_testkit::{proxy, server};

pub use proxy::Proxy;
pub use server::RedisServer;

/// The marker a [`Monitor`] stops at.
const MONITOR_END: &str = "quorumlock-compare:monitor-end";

/// Counts client commands on some servers (see [`Nodes::monitor`]).
pub struct Monitor {
    ports: Vec<u16>,
    threads: Vec<JoinHandle<u64>>,
}

impl Monitor {
    /// Commands clients sent since the start, summed over the servers.
    pub fn finish(self) -> u64 {
        for port in &self.ports {
            let mut stream = TcpStream::connect(("127.0.0.1", *port)).expect("marker connection");
            let marker = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{MONITOR_END}\r\n", MONITOR_END.len());
            stream.write_all(marker.as_bytes()).expect("marker");
            let mut reply = String::new();
            BufReader::new(stream)
                .read_line(&mut reply)
                .expect("marker reply");
        }
        self.threads
            .into_iter()
            .map(|t| t.join().expect("monitor thread"))
            .sum()
    }
}

/// Local nodes, and the runtime that hosts proxies in front of them.
pub struct Nodes {
    pub servers: Vec<RedisServer>,
    proxies: tokio::runtime::Runtime,
}

impl Nodes {
    /// Starts `n` redis-server processes.
    pub fn start(n: usize) -> Nodes {
        let proxies = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("proxies")
            .enable_all()
            .build()
            .expect("proxy runtime");
        Nodes {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
            proxies,
        }
    }

    /// URLs of the first `n` servers, connected to directly.
    pub fn direct(&self, n: usize) -> Vec<String> {
        self.servers[..n].iter().map(RedisServer::url).collect()
    }

    /// A proxy in front of server `index` with `latency` added each way.
    pub fn proxy(&self, index: usize, latency: Duration) -> Proxy {
        let _runtime = self.proxies.enter();
        let proxy = Proxy::start(self.servers[index].port());
        proxy.set_latency(latency);
        proxy
    }

    /// Starts counting, with `MONITOR`, the commands clients send to the
    /// first `n` servers, apart from those run inside scripts (which
    /// `INFO commandstats` cannot tell apart: a `SET` may be either).
    /// `MONITOR` costs the servers time, so count in rounds that are not
    /// timed.
    pub fn monitor(&self, n: usize) -> Monitor {
        let threads = self.servers[..n]
            .iter()
            .map(|server| {
                let port = server.port();
                let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("monitor connection");
                stream.write_all(b"MONITOR\r\n").expect("MONITOR");
                let mut reader = BufReader::new(stream);
                let mut ok = String::new();
                reader.read_line(&mut ok).expect("MONITOR reply");
                assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
                std::thread::spawn(move || {
                    let mut requests = 0;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return requests;
                        }
                        // +<time> [<db> <client address or "lua">] "CMD" ...
                        let Some(rest) = line.split_once(" [").map(|(_, rest)| rest) else {
                            continue;
                        };
                        let (source, command) = rest.split_once("] ").unwrap_or((rest, ""));
                        if command.starts_with(&format!("\"ECHO\" \"{MONITOR_END}\"")) {
                            return requests;
                        }
                        if !source.ends_with("lua") && !command.starts_with("\"INFO\"") {
                            requests += 1;
                        }
                    }
                })
            })
            .collect();
        Monitor {
            ports: self.servers[..n].iter().map(RedisServer::port).collect(),
            threads,
        }
    }

    /// Calls per command name, summed over the first `n` servers
    /// (`INFO commandstats`; commands run inside scripts count too).
    pub fn command_calls(&self, n: usize) -> HashMap<String, u64> {
        self.command_stats(n)
            .into_iter()
            .map(|(name, (calls, _))| (name, calls))
            .collect()
    }

    /// Calls and microseconds spent per command name, summed over the first
    /// `n` servers (`INFO commandstats`).
    pub fn command_stats(&self, n: usize) -> HashMap<String, (u64, u64)> {
        let mut totals = HashMap::new();
        for server in &self.servers[..n] {
            let info = server.command(&["INFO", "commandstats"]).unwrap_or_default();
            for line in info.lines() {
                let Some((name, stats)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|rest| rest.split_once(":calls="))
                else {
                    continue;
                };
                let field = |key: &str| -> u64 {
                    stats
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(key))
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                let calls = stats.split(',').next().and_then(|c| c.parse().ok()).unwrap_or(0);
                let entry = totals.entry(name.to_owned()).or_insert((0, 0));
                entry.0 += calls;
                entry.1 += field("usec=");
            }
        }
        totals
    }

    /// CPU time the first `n` servers used so far.
    pub fn cpu(&self, n: usize) -> Duration {
        self.servers[..n]
            .iter()
            .map(|s| crate::cpu::process(s.pid()))
            .sum()
    }

    /// Deletes every key on every server (between scenarios).
    pub fn flush(&self) {
        for server in &self.servers {
            let _ = server.command(&["FLUSHALL"]);
        }
    }
}
