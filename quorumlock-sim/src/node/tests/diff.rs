//! The differential test: seeded random sequences of commands and of the
//! library's own scripts (plus a few scripts of our own for the rest of
//! the Lua surface) sent to a real `redis-server` and to a [`SimNode`],
//! replies compared byte for byte; only replies that read a clock (`TIME`,
//! `PTTL`, `TTL`, the fenced scripts' µs clock) are compared loosely.
//!
//! `QUORUMLOCK_SIM_DIFF_SEQUENCES` sets how many sequences to run.

use std::io::Write;
use std::net::TcpStream;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::super::{NodeClock, SimNode};
use super::scripts::library_scripts;
use super::wire::{Compare, Resp, agree, real_reply, sim_reply};
use quorumlock_testkit::server::RedisServer;

/// Sequences run by default: enough to cover every script and command
/// several ways, quick enough for every test run.
const SEQUENCES: u64 = 300;
/// Requests per sequence.
const LENGTH: usize = 30;
/// The client clock the scripts are given (`now_ms`), fixed so that the
/// queue entries' deadlines are the same on both sides.
const NOW_MS: u64 = 1_000_000_000;

/// Builds the random requests of a sequence.
struct Gen {
    rng: StdRng,
    scripts: Vec<(String, String, String)>,
    /// The node clock at the sequence's start, µs: proposals are near it.
    base_us: u64,
    /// Counts the ttls that must be unlike any other.
    unique: u64,
}

fn pick<'a>(rng: &mut StdRng, items: &[&'a str]) -> &'a str {
    items[rng.random_range(0..items.len())]
}

impl Gen {
    fn key(&mut self) -> String {
        format!("k{}", self.rng.random_range(1..4))
    }
    fn queue(key: &str) -> String {
        format!("quorumlock:waiters:{{{key}}}")
    }
    fn fence(key: &str) -> String {
        format!("quorumlock:fence:{{{key}}}")
    }
    fn any_key(&mut self) -> String {
        let key = self.key();
        match self.rng.random_range(0..4) {
            0 => Self::queue(&key),
            1 => Self::fence(&key),
            _ => key,
        }
    }
    fn token(&mut self) -> String {
        format!("t{}", self.rng.random_range(1..4))
    }
    fn ttl(&mut self) -> String {
        pick(
            &mut self.rng,
            &["60000", "90000", "120000", "60000", "0", "-5", "x"],
        )
        .to_owned()
    }
    fn member(&mut self) -> String {
        let deadline = if self.rng.random_bool(0.5) {
            NOW_MS + 100_000
        } else {
            NOW_MS - 1_000
        };
        match self.rng.random_range(0..8) {
            0 => "junk".to_owned(),
            n => format!("{deadline}:{}:{:016x}", pick(&mut self.rng, &["c1", "a2"]), n % 3),
        }
    }
    fn proposal(&mut self) -> String {
        let offset = self.rng.random_range(0..4) * 1000;
        match self.rng.random_range(0..4) {
            0 => "0".to_owned(),
            1 => (self.base_us - 1_000_000_000).to_string(),
            _ => (self.base_us + 5_000_000 + offset).to_string(),
        }
    }
    fn keys(&mut self) -> Vec<String> {
        let n = self.rng.random_range(1..4);
        (0..n).map(|_| self.key()).collect()
    }

    /// One request and how to compare its replies.
    fn request(&mut self) -> (Vec<String>, Compare) {
        if self.rng.random_range(0..3) == 0 {
            return (self.library_script(), Compare::Clock);
        }
        if self.rng.random_range(0..6) == 0 {
            return (self.lua_surface(), Compare::Exact);
        }
        self.command()
    }

    fn command(&mut self) -> (Vec<String>, Compare) {
        let (k, t) = (self.any_key(), self.token());
        let words: Vec<String> = match self.rng.random_range(0..20) {
            0 | 1 => {
                let mut cmd = vec!["SET".into(), k, t];
                for _ in 0..self.rng.random_range(0..3) {
                    match pick(&mut self.rng, &["NX", "XX", "PX", "EX", "KEEPTTL", "GET", "PXAT"]) {
                        "PX" => cmd.extend(["PX".into(), self.ttl()]),
                        "EX" => cmd.extend(["EX".into(), "100".into()]),
                        other => cmd.push(other.into()),
                    }
                }
                cmd
            }
            2 => vec!["GET".into(), k],
            3 => vec!["MGET".into(), k, self.any_key(), self.any_key()],
            4 => vec![
                pick(&mut self.rng, &["DEL", "UNLINK", "EXISTS"]).into(),
                k,
                self.any_key(),
            ],
            5 => {
                // A ttl no other request gives: GT and LT then compare
                // expiries that differ by far more than the time between
                // the sends to the two nodes.
                self.unique += 1;
                let ttl = (30_000 + 1_000 * self.unique).to_string();
                let mut cmd = vec!["PEXPIRE".into(), k, ttl];
                if self.rng.random_bool(0.5) {
                    cmd.push(pick(&mut self.rng, &["NX", "XX", "GT", "LT", "BAD"]).into());
                }
                cmd
            }
            6 => {
                return (
                    vec![pick(&mut self.rng, &["PTTL", "TTL"]).into(), k],
                    Compare::Clock,
                );
            }
            7 => vec!["TYPE".into(), k],
            8 => vec![
                "INCRBY".into(),
                k,
                pick(&mut self.rng, &["1", "-7", "x", "9223372036854775807"]).into(),
            ],
            9..=15 => self.zset_command(k),
            16 => vec!["PUBLISH".into(), "quorumlock:wake:c1".into(), t],
            17 => vec![pick(&mut self.rng, &["NOSUCH", "GET", "ZADD", "PING"]).into()],
            18 => vec!["ZSCORE".into(), k, self.member()],
            _ => vec!["DBSIZE".into()],
        };
        (words, Compare::Exact)
    }

    /// A sorted-set command on `k`.
    fn zset_command(&mut self, k: String) -> Vec<String> {
        match self.rng.random_range(9..16) {
            9 | 10 => {
                let mut cmd = vec!["ZADD".into(), k];
                if self.rng.random_bool(0.5) {
                    cmd.push(pick(&mut self.rng, &["NX", "XX", "GT", "LT", "CH", "INCR"]).into());
                }
                for _ in 0..self.rng.random_range(1..3) {
                    cmd.push(pick(&mut self.rng, &["1", "2.5", "-inf", "1700000000000000", "x"]).into());
                    cmd.push(self.member());
                }
                cmd
            }
            11 => vec!["ZREM".into(), k, self.member()],
            12 => vec![pick(&mut self.rng, &["ZCARD", "DBSIZE"]).into(), k],
            13 => {
                let (a, b) = (
                    self.rng.random_range(-3..3).to_string(),
                    self.rng.random_range(-3..3).to_string(),
                );
                let mut cmd = vec!["ZRANGE".into(), k, a, b];
                if self.rng.random_bool(0.5) {
                    cmd.push(pick(&mut self.rng, &["WITHSCORES", "REV", "LIMIT"]).into());
                }
                cmd
            }
            14 => vec![
                "ZPOPMIN".into(),
                k,
                pick(&mut self.rng, &["1", "2", "0", "-1"]).into(),
            ],
            _ => vec![
                "ZREMRANGEBYRANK".into(),
                k,
                "0".into(),
                self.rng.random_range(-2..2).to_string(),
            ],
        }
    }

    fn library_script(&mut self) -> Vec<String> {
        let index = self.rng.random_range(0..self.scripts.len());
        let (name, sha, source) = self.scripts[index].clone();
        let (keys, argv) = self.script_args(&name);
        let mut cmd = if name == "FENCED_WRITE" {
            vec!["EVAL".into(), source]
        } else {
            vec!["EVALSHA".into(), sha]
        };
        cmd.push(keys.len().to_string());
        cmd.extend(keys);
        cmd.extend(argv);
        cmd
    }

    /// The arguments of the lock, fence and batch scripts.
    fn script_args(&mut self, name: &str) -> (Vec<String>, Vec<String>) {
        let (keys, token, ttl) = (self.keys(), self.token(), self.ttl());
        let queues: Vec<String> = keys.iter().map(|k| Self::queue(k)).collect();
        let fences: Vec<String> = keys.iter().map(|k| Self::fence(k)).collect();
        let now = NOW_MS.to_string();
        match name {
            "ACQUIRE" | "EXTEND" => (keys, vec![token, ttl]),
            "RELEASE" => ([keys, queues].concat(), vec![token, now]),
            "RENEW" => {
                let heal = pick(&mut self.rng, &["0", "1"]).to_owned();
                (keys.clone(), vec![heal, keys.len().to_string(), token, ttl])
            }
            "CLAIM" => (vec![self.any_key()], vec![format!("pending:{token}"), ttl]),
            "STORE" => (
                vec![self.any_key()],
                vec![format!("pending:{token}"), "done:x".into(), ttl],
            ),
            "FENCED_ACQUIRE" => {
                let argv = vec![token, ttl, self.proposal(), "100000".into(), "60000000".into()];
                ([keys, fences].concat(), argv)
            }
            "PROPOSE" => (
                [keys, fences].concat(),
                vec![self.proposal(), "100000".into(), token],
            ),
            "BATCH" => {
                let mut argv = vec![now];
                argv.extend(keys.iter().map(|_| self.token()));
                ([keys, queues].concat(), argv)
            }
            "BATCH_IN_ORDER" => {
                let (mut k, mut argv) = (Vec::new(), vec![now]);
                for key in keys {
                    if self.rng.random_bool(0.5) {
                        argv.extend(["a".into(), self.token(), "60000".into()]);
                        k.push(key);
                    } else {
                        argv.extend(["r".into(), self.token()]);
                        k.extend([key.clone(), Self::queue(&key)]);
                    }
                }
                (k, argv)
            }
            other => self.queue_script_args(other, keys, token, ttl),
        }
    }

    /// The arguments of the queue, inspection and fenced-write scripts.
    fn queue_script_args(
        &mut self,
        name: &str,
        keys: Vec<String>,
        token: String,
        ttl: String,
    ) -> (Vec<String>, Vec<String>) {
        let queues: Vec<String> = keys.iter().map(|k| Self::queue(k)).collect();
        let fences: Vec<String> = keys.iter().map(|k| Self::fence(k)).collect();
        let (now, place) = (NOW_MS.to_string(), self.rng.random_range(1..5).to_string());
        let member = self.member();
        match name {
            "REGISTER" => (queues, vec![place, member, ttl]),
            "UNREGISTER" => (queues, vec![member]),
            "ACQUIRE_OR_QUEUE" => (
                vec![keys[0].clone(), queues[0].clone()],
                vec![token, ttl, place, member, "60000".into()],
            ),
            "FENCED_ACQUIRE_OR_QUEUE" => {
                let keys = vec![keys[0].clone(), fences[0].clone(), queues[0].clone()];
                let argv = vec![
                    token,
                    ttl,
                    place,
                    member,
                    "60000".into(),
                    self.proposal(),
                    "100000".into(),
                    "60000000".into(),
                ];
                (keys, argv)
            }
            "INSPECT" => (vec![self.any_key(), queues[0].clone()], Vec::new()),
            "FORCE_DELETE" => (vec![self.any_key(), queues[0].clone()], vec![now]),
            "FENCED_WRITE" => {
                let op = match self.rng.random_range(0..3) {
                    0 => vec!["set".into(), token],
                    _ => vec![
                        "incrby".into(),
                        self.rng.random_range(-5..5).to_string(),
                        "-3".into(),
                    ],
                };
                let seen = self.rng.random_range(0..5).to_string();
                (
                    vec![Self::fence(&keys[0]), self.any_key()],
                    [vec![seen], op].concat(),
                )
            }
            other => panic!("no arguments for the script {other}: add them here"),
        }
    }

    /// A script of our own over the Lua surface the library's scripts use
    /// (and its error paths).
    fn lua_surface(&mut self) -> Vec<String> {
        const SURFACE: &[&str] = &[
            "return redis.call('INCR', KEYS[1])",
            "return redis.pcall('INCR', KEYS[1])",
            "return redis.call('GET', KEYS[1], 'extra')",
            "return redis.call('NOSUCH')",
            "return redis.call()",
            "return redis.pcall({})",
            "return redis.call('SUBSCRIBE', 'x')",
            "local x\nreturn x + 1",
            "return undefined_global",
            "x = 1",
            "error('boom')",
            "error({err='MY boom'})",
            "return redis.error_reply('boom')",
            "return redis.error_reply('MY boom')",
            "return redis.status_reply('FINE')",
            "return {1, 2.9, -2.9, true, false, 'a', {ok='x'}, {3, {4}}, nil, 5}",
            "return redis.call('TYPE', KEYS[1]).ok",
            "return redis.call('SET', KEYS[1], 0.1) and redis.call('GET', KEYS[1])",
            "return redis.call('SET', KEYS[1], 1e20) and redis.call('GET', KEYS[1])",
            "return {redis.call('ZADD', KEYS[1], 1, 'a', 2, 'b')}",
            "return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')",
            "return {string.match(ARGV[1], '^(%d+):(%x+):')}",
            "return math.min(3, 1, 2) + math.max(4, 5)",
            "return table.concat({unpack(KEYS, 1, 1)}, ',')",
            "return #KEYS + #ARGV",
            "return tonumber('0x10') + tonumber(' 7 ')",
            "return type(redis.call('GET', 'nope'))",
            "return redis.sha1hex('abc')",
            "return 'x' 'y'",
            "return string.format('%d %s', 3, 'q')",
            "local t = {} t[#t + 1] = 'a' table.insert(t, 'b') return t",
        ];
        let source = pick(&mut self.rng, SURFACE).to_owned();
        let key = self.any_key();
        let member = self.member();
        vec!["EVAL".into(), source, "1".into(), key, member]
    }
}

fn packed(words: &[String]) -> Vec<u8> {
    let mut cmd = redis::cmd(&words[0]);
    for word in &words[1..] {
        cmd.arg(word.as_str());
    }
    cmd.get_packed_command()
}

/// Empties the real server (keys and scripts); its clock, unix µs.
fn start_sequence(real: &mut TcpStream, real_buf: &mut Vec<u8>) -> u64 {
    let base = vec!["FLUSHALL".to_owned()];
    real.write_all(
        &[
            packed(&base),
            packed(&["SCRIPT".into(), "FLUSH".into()]),
            packed(&["TIME".into()]),
        ]
        .concat(),
    )
    .expect("a write");
    real_reply(real, real_buf);
    real_reply(real, real_buf);
    let (Resp::Array(Some(time)), _) = real_reply(real, real_buf) else {
        panic!("TIME")
    };
    let [Resp::Bulk(Some(secs)), Resp::Bulk(Some(micros))] = &time[..] else {
        panic!("TIME")
    };
    let number = |b: &[u8]| String::from_utf8_lossy(b).parse::<u64>().expect("a number");
    number(secs) * 1_000_000 + number(micros)
}

/// Runs `count` sequences from `seed`; the mismatches, described.
async fn run_sequences(seed: u64, count: u64) -> (u64, Vec<String>) {
    let server = RedisServer::start();
    let mut real = TcpStream::connect(("127.0.0.1", server.port())).expect("the real server");
    let mut real_buf = Vec::new();
    let scripts = library_scripts();
    let mut mismatches = Vec::new();
    let mut requests = 0;
    for sequence in 0..count {
        let rng = StdRng::seed_from_u64(seed + sequence);
        let base_us = start_sequence(&mut real, &mut real_buf);
        let node = SimNode::new("diff", base_us / 1000, Instant::now(), NodeClock::default());
        let (mut sim, server_side) = tokio::io::duplex(1 << 20);
        let serving = node.clone();
        tokio::spawn(async move { serving.serve(server_side).await });
        let mut sim_buf = Vec::new();
        let mut generator = Gen {
            rng,
            scripts: Vec::new(),
            base_us,
            unique: 0,
        };
        let mut batch: Vec<(Vec<String>, Compare)> = scripts
            .iter()
            .map(|(_, source)| {
                (
                    vec!["SCRIPT".into(), "LOAD".into(), source.clone()],
                    Compare::Exact,
                )
            })
            .collect();
        generator.scripts = scripts
            .iter()
            .map(|(name, source)| {
                (
                    name.clone(),
                    super::super::sha1(source.as_bytes()),
                    source.clone(),
                )
            })
            .collect();
        batch.extend((0..LENGTH).map(|_| generator.request()));
        for (words, how) in batch {
            requests += 1;
            let bytes = packed(&words);
            real.write_all(&bytes).expect("a write");
            sim.write_all(&bytes).await.expect("a write");
            let (real_resp, real_raw) = real_reply(&mut real, &mut real_buf);
            let (sim_resp, sim_raw) = sim_reply(&mut sim, &mut sim_buf).await;
            let skip_time = words[0] == "TIME";
            if real_raw != sim_raw && !skip_time && !agree(&real_resp, &sim_resp, how) {
                mismatches.push(format!(
                    "seed {}: {:?}\n  real: {:?}\n  sim:  {:?}",
                    seed + sequence,
                    words,
                    String::from_utf8_lossy(&real_raw),
                    String::from_utf8_lossy(&sim_raw)
                ));
            }
        }
    }
    (requests, mismatches)
}

#[tokio::test]
async fn the_simulated_node_answers_as_redis_does() {
    let count = std::env::var("QUORUMLOCK_SIM_DIFF_SEQUENCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEQUENCES);
    let seed = std::env::var("QUORUMLOCK_SIM_DIFF_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let (requests, mismatches) = run_sequences(seed, count).await;
    eprintln!(
        "{count} sequences, {requests} requests, {} mismatches",
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches, the first ones:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(40)].join("\n")
    );
}
