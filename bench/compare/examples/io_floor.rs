//! How fast can a one-node lock+unlock cycle be with the redis crate's
//! connection, and how much faster without it?
//!
//! Every Rust Redlock client (rslock, quorumlock, the runner's "raw" limit)
//! sends its requests through the redis crate's `MultiplexedConnection`: the
//! caller hands each request to a driver task, which writes it, reads the
//! reply and passes it back. At N=1 a cycle is two round trips and nothing
//! else, so that hand-over is a fixed share of every cycle. This measures the
//! share: the same two requests (`SET NX PX`, then an owner-checked release
//! script by `EVALSHA`), encoded and parsed by the redis crate, once through
//! its multiplexed connection and once written and read by the calling task
//! itself on a socket of its own, beside rslock's and quorumlock's
//! lock+unlock on the same node. The four alternate within each round; each
//! round prints their p50s, and the end the medians of the per-round ratios
//! and the calling thread's CPU time per cycle, in user space and in the
//! kernel (from `/proc/thread-self/stat`, Linux only, in 10 ms ticks: a
//! round of 5,000 cycles resolves 2 µs per cycle).
//!
//! ```text
//! cargo run -p quorumlock-compare --release --example io_floor [ROUNDS [CYCLES]]
//! ```
//!
//! The caller-task path here serves one request at a time and gives up on
//! any surprise (it panics); a client built on it would need what the
//! driver task gives: concurrent callers, pipelining, cancellation midway
//! through a reply. It is the bound such a client could reach, not one.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{Cmd, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Lock ttl: long next to any cycle, so that no key expires while held.
const TTL: Duration = Duration::from_secs(10);

const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The four ways of doing one cycle.
const NAMES: [&str; 4] = ["redis crate", "caller task", "rslock", "quorumlock"];

struct Contenders {
    multiplexed: MultiplexedConnection,
    socket: TcpStream,
    /// Bytes read from `socket` and not yet parsed.
    unparsed: Vec<u8>,
    sha: String,
    rslock: rslock::LockManager,
    quorumlock: quorumlock::Redlock,
}

fn set_nx(key: &str, token: &str) -> Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64);
    cmd
}

fn release(sha: &str, key: &str, token: &str) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(1).arg(key).arg(token);
    cmd
}

impl Contenders {
    /// Sends `cmd` on the task's own socket and reads its one reply.
    async fn on_socket(&mut self, cmd: &Cmd) -> Value {
        self.socket
            .write_all(&cmd.get_packed_command())
            .await
            .expect("write");
        self.unparsed.clear();
        let mut chunk = [0u8; 512];
        loop {
            let n = self.socket.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the node closed the connection");
            self.unparsed.extend_from_slice(&chunk[..n]);
            // A reply that is not complete yet fails to parse: read on.
            if let Ok(value) = redis::parse_redis_value(&self.unparsed) {
                return value;
            }
        }
    }

    async fn cycle(&mut self, which: usize, key: &str) {
        let token = format!("{:032x}", rand::random::<u128>());
        match which {
            0 => {
                let set: Value = set_nx(key, &token)
                    .query_async(&mut self.multiplexed)
                    .await
                    .expect("SET");
                assert_eq!(set, Value::Okay);
                let deleted: i64 = release(&self.sha, key, &token)
                    .query_async(&mut self.multiplexed)
                    .await
                    .expect("EVALSHA");
                assert_eq!(deleted, 1);
            }
            1 => {
                assert_eq!(self.on_socket(&set_nx(key, &token)).await, Value::Okay);
                let cmd = release(&self.sha, key, &token);
                assert_eq!(self.on_socket(&cmd).await, Value::Int(1));
            }
            2 => {
                let lock = self.rslock.lock(key, TTL).await.expect("rslock");
                self.rslock.unlock(&lock).await;
            }
            _ => {
                let guard = self.quorumlock.try_lock(key, TTL).await.expect("quorumlock");
                guard.expect("free").release().await.expect("release");
            }
        }
    }
}

/// The calling thread's CPU time so far, user and kernel, in clock ticks
/// (`None` where `/proc` does not say).
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may
    // hold spaces: utime and stime are the 12th and 13th of them.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(11);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// Clock ticks per second on Linux (`sysconf(_SC_CLK_TCK)` is 100 on every
/// architecture the kernel builds for user space).
const TICKS_PER_SEC: f64 = 100.0;

fn p50(samples: &mut [Duration]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a count"));
    let rounds = args.next().unwrap_or(7);
    let cycles = args.next().unwrap_or(5000);
    let node = quorumlock_testkit::RedisServer::start();
    let client = redis::Client::open(node.url()).expect("URL");
    let mut multiplexed = client.get_multiplexed_async_connection().await.expect("connect");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE)
        .query_async(&mut multiplexed)
        .await
        .expect("SCRIPT LOAD");
    let socket = TcpStream::connect(("127.0.0.1", node.port()))
        .await
        .expect("connect");
    socket.set_nodelay(true).expect("TCP_NODELAY");
    let mut contenders = Contenders {
        multiplexed,
        socket,
        unparsed: Vec::new(),
        sha,
        rslock: rslock::LockManager::new(vec![node.url()]),
        quorumlock: quorumlock::Redlock::builder()
            .nodes([node.url()])
            .build()
            .expect("config"),
    };
    // Connections open and scripts cached before the first timed cycle.
    for which in 0..NAMES.len() {
        for i in 0..100 {
            contenders.cycle(which, &format!("warm:{which}:{i}")).await;
        }
    }
    println!("p50 of one lock+unlock cycle at N=1, µs ({rounds} rounds of {cycles} cycles)");
    println!(
        "{:>5}  {:>11}  {:>11}  {:>8}  {:>10}",
        "round", NAMES[0], NAMES[1], NAMES[2], NAMES[3]
    );
    let mut ratios: [Vec<f64>; 3] = Default::default();
    // Per contender, per round: user and kernel µs per cycle.
    let mut cpu: [[Vec<f64>; 2]; NAMES.len()] = Default::default();
    for round in 0..rounds {
        let mut p50s = [0.0; NAMES.len()];
        for (which, p50_of) in p50s.iter_mut().enumerate() {
            let mut samples = Vec::with_capacity(cycles);
            let before = cpu_ticks();
            for i in 0..cycles {
                let key = format!("floor:{round}:{which}:{i}");
                let started = Instant::now();
                contenders.cycle(which, &key).await;
                samples.push(started.elapsed());
            }
            *p50_of = p50(&mut samples);
            if let (Some(before), Some(after)) = (before, cpu_ticks()) {
                let per_cycle = |ticks: u64| ticks as f64 / TICKS_PER_SEC * 1e6 / cycles as f64;
                cpu[which][0].push(per_cycle(after.0 - before.0));
                cpu[which][1].push(per_cycle(after.1 - before.1));
            }
        }
        println!(
            "{round:>5}  {:>11.1}  {:>11.1}  {:>8.1}  {:>10.1}",
            p50s[0], p50s[1], p50s[2], p50s[3]
        );
        ratios[0].push(p50s[1] / p50s[0]);
        ratios[1].push(p50s[3] / p50s[2]);
        ratios[2].push(p50s[2] / p50s[0]);
    }
    println!("medians of the per-round ratios:");
    println!("  caller task / redis crate: {:.3}", median(&mut ratios[0]));
    println!("  quorumlock / rslock:       {:.3}", median(&mut ratios[1]));
    println!("  rslock / redis crate:      {:.3}", median(&mut ratios[2]));
    println!("calling thread's CPU per cycle, medians of the rounds, µs (user + kernel):");
    for (name, [user, kernel]) in NAMES.iter().zip(&mut cpu) {
        if !user.is_empty() {
            println!("  {name:<12} {:>5.1} + {:>5.1}", median(user), median(kernel));
        }
    }
    let report = contenders.quorumlock.shutdown(Duration::from_secs(5)).await;
    assert!(report.is_complete(), "{report:?}");
}
