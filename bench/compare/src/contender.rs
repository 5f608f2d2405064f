//! The contenders: one lock+unlock cycle each, on the same nodes.
//!
//! - raw: `SET key token NX PX` to every node at once, returning at a
//!   majority, then an owner-checked release script (`EVALSHA`, preloaded)
//!   to every node at once, again returning at a majority. Sent with the
//!   redis crate directly over one multiplexed connection per node: the
//!   least a Redlock cycle can cost.
//! - raw (all): the same, waiting for every node each time (what a fan-out
//!   without early exit costs; rslock works this way).
//! - raw sequential: one node after the other, on persistent connections
//!   (the shape of redlock, without its new connection per command).
//! - quorumlock: `try_lock` + `release` with the default settings
//!   (auto-renewal on), plain or fenced.
//! - quorumlock on etcd or ZooKeeper: the same `try_lock` + `release`,
//!   through a client on the `etcd://` URL of a three-member cluster or the
//!   `zk://` URL of a three-server ensemble (see [`crate::consensus`]).
//! - rslock: `LockManager::lock` + `unlock` (concurrent fan-out, waits for
//!   every node).
//! - redlock: `RedLock::lock` + `unlock` (synchronous, sequential, a new
//!   connection per command). It blocks its thread, so the runners give it
//!   threads of its own.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;

/// Lock ttl for every contender: long next to any cycle, so that no key
/// expires while it is held.
pub const TTL: Duration = Duration::from_secs(10);

/// How long raw keeps driving the replies it no longer waits for.
const DRAIN: Duration = Duration::from_secs(2);

const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// Which contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Raw,
    RawAll,
    RawSeq,
    Ours,
    Fenced,
    Rslock,
    Redlock,
    Etcd,
    ZooKeeper,
}

impl Kind {
    /// The kind named on the command line (`--loop`).
    pub fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "raw" => Kind::Raw,
            "raw-all" => Kind::RawAll,
            "raw-seq" => Kind::RawSeq,
            "quorumlock" => Kind::Ours,
            "fenced" => Kind::Fenced,
            "rslock" => Kind::Rslock,
            "redlock" => Kind::Redlock,
            "etcd" => Kind::Etcd,
            "zookeeper" => Kind::ZooKeeper,
            _ => return None,
        })
    }

    /// Its colour in the charts (the same in every chart).
    pub fn color(self) -> usize {
        self as usize
    }

    /// The name in tables and plots.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::RawAll => "raw (all)",
            Kind::RawSeq => "raw sequential",
            Kind::Ours => "quorumlock",
            Kind::Fenced => "quorumlock fenced",
            Kind::Rslock => "rslock 0.10",
            Kind::Redlock => "redlock 2.0",
            Kind::Etcd => "quorumlock on etcd (3 members)",
            Kind::ZooKeeper => "quorumlock on ZooKeeper (3 servers)",
        }
    }
}

/// A connected contender.
pub enum Contender {
    Raw(Raw),
    Ours(quorumlock::Redlock),
    Rslock(rslock::LockManager),
    Redlock(redlock::RedLock),
}

impl Contender {
    /// Creates the client of `kind` over `urls` and warms it up with one
    /// cycle (connections open, scripts cached); quorumlock's clients with
    /// the default settings.
    pub async fn connect(kind: Kind, urls: &[String]) -> Contender {
        Contender::connect_with(kind, urls, quorumlock::DEFAULT_NODE_TIMEOUT).await
    }

    /// As [`Contender::connect`], quorumlock's clients with `node_timeout`
    /// (the others have no such setting).
    pub async fn connect_with(kind: Kind, urls: &[String], node_timeout: Duration) -> Contender {
        let contender = match kind {
            Kind::Raw | Kind::RawAll | Kind::RawSeq => Contender::Raw(Raw::connect(kind, urls).await),
            // `urls` is one etcd:// or zk:// URL for a consensus store: the
            // builder tells the stores apart.
            Kind::Ours | Kind::Fenced | Kind::Etcd | Kind::ZooKeeper => {
                let redlock = quorumlock::Redlock::builder()
                    .nodes(urls.iter().cloned())
                    .node_timeout(node_timeout)
                    .build()
                    .expect("quorumlock config");
                let options = redlock.options().fenced(kind == Kind::Fenced);
                Contender::Ours(redlock.with_options(options).expect("options"))
            }
            Kind::Rslock => Contender::Rslock(rslock::LockManager::new(urls.to_vec())),
            Kind::Redlock => Contender::Redlock(redlock::RedLock::new(urls.to_vec())),
        };
        let key = format!("warmup:{}", rand::random::<u64>());
        match &contender {
            Contender::Redlock(rl) => {
                let rl = rl.clone();
                tokio::task::spawn_blocking(move || blocking_cycle(&rl, &key))
                    .await
                    .expect("warm-up thread")
                    .expect("warm-up cycle");
            }
            _ => contender.cycle(&key).await.expect("warm-up cycle"),
        }
        contender
    }

    /// One lock+unlock cycle on `key` (async contenders; redlock would block
    /// the runtime, so the runners call [`blocking_cycle`] on a thread).
    pub async fn cycle(&self, key: &str) -> Result<(), String> {
        match self {
            Contender::Raw(raw) => raw.cycle(key).await,
            Contender::Ours(redlock) => {
                let guard = redlock
                    .try_lock(key, TTL)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("held by another owner")?;
                guard.release().await.map(drop).map_err(|e| e.to_string())
            }
            Contender::Rslock(manager) => {
                let lock = manager.lock(key, TTL).await.map_err(|e| e.to_string())?;
                manager.unlock(&lock).await;
                Ok(())
            }
            Contender::Redlock(_) => panic!("redlock blocks: use blocking_cycle on a thread"),
        }
    }
}

/// One redlock lock+unlock cycle (blocks the calling thread).
pub fn blocking_cycle(rl: &redlock::RedLock, key: &str) -> Result<(), String> {
    let ttl_ms = TTL.as_millis() as usize;
    match rl.lock(key.as_bytes(), ttl_ms) {
        Ok(Some(lock)) => {
            rl.unlock(&lock);
            Ok(())
        }
        Ok(None) => Err("not acquired".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The raw limit (see the module docs).
pub struct Raw {
    kind: Kind,
    conns: Vec<MultiplexedConnection>,
    sha: String,
}

impl Raw {
    async fn connect(kind: Kind, urls: &[String]) -> Raw {
        let mut conns = Vec::new();
        let mut sha = String::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("node URL");
            // No response timeout: the black-hole scenario relies on early
            // exit, not on timeouts.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("connect");
            sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE)
                .query_async(&mut conn)
                .await
                .expect("SCRIPT LOAD");
            conns.push(conn);
        }
        Raw { kind, conns, sha }
    }

    async fn cycle(&self, key: &str) -> Result<(), String> {
        let token: Arc<str> = format!("{:032x}", rand::random::<u128>()).into();
        let quorum = self.conns.len() / 2 + 1;
        let set = |conn: &MultiplexedConnection| {
            let (mut conn, token, key) = (conn.clone(), Arc::clone(&token), key.to_owned());
            async move {
                let reply: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&*token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<bool, String>(reply.is_some())
            }
        };
        let release = |conn: &MultiplexedConnection| {
            let (mut conn, token, key, sha) =
                (conn.clone(), Arc::clone(&token), key.to_owned(), self.sha.clone());
            async move {
                let deleted: i64 = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(&key)
                    .arg(&*token)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<bool, String>(deleted == 1)
            }
        };
        let (granted, released) = match self.kind {
            Kind::RawSeq => {
                let mut granted = 0;
                for conn in &self.conns {
                    granted += usize::from(set(conn).await?);
                }
                let mut released = 0;
                for conn in &self.conns {
                    released += usize::from(release(conn).await?);
                }
                (granted, released)
            }
            _ => {
                let wait_for = if self.kind == Kind::RawAll {
                    self.conns.len()
                } else {
                    quorum
                };
                let granted = fan_out(self.conns.iter().map(set).collect(), wait_for).await?;
                let released = fan_out(self.conns.iter().map(release).collect(), wait_for).await?;
                (granted, released)
            }
        };
        if granted < quorum || released < quorum {
            return Err(format!("granted {granted}, released {released}, quorum {quorum}"));
        }
        Ok(())
    }
}

/// Drives `requests` until `wait_for` of them said yes (or all answered);
/// the rest are left to a background task for a while, so that their
/// commands still reach the nodes. Returns the number of yes answers.
async fn fan_out<F>(requests: Vec<F>, wait_for: usize) -> Result<usize, String>
where
    F: Future<Output = Result<bool, String>> + Send + 'static,
{
    let mut pending: FuturesUnordered<F> = requests.into_iter().collect();
    let mut yes = 0;
    while let Some(reply) = pending.next().await {
        yes += usize::from(reply?);
        if yes >= wait_for {
            break;
        }
    }
    if !pending.is_empty() {
        tokio::spawn(async move {
            let _ = tokio::time::timeout(DRAIN, pending.for_each(|_| async {})).await;
        });
    }
    Ok(yes)
}
