//! The node layer: one member of the quorum and the servers behind it,
//! their connections, the order of requests, batching, replica
//! acknowledgement, pub/sub and the rate of their clocks.
//!
//! A member is one Redis server, a Sentinel-managed master (one server at a
//! time, the one the sentinels name) or a Redis Cluster (a server per
//! primary, requests routed by hash slot: `cluster`). It sends
//! [`Request`]s and returns their typed replies; what a request means (a
//! lock, a fence, a queue) is for the layers above. Timeouts are not applied
//! here but by the quorum layer, which owns the per-node budget; what a
//! server does watch is whether its connection still answers at all (see
//! `Conn::stall_limit`), since a request the quorum layer gave up on tells
//! the connection nothing.

mod batch;
mod clock;
mod cluster;
mod conn;
#[cfg(feature = "sim")]
mod dialed;
mod health;
pub(crate) mod pubsub;
mod replica;
mod server;
mod target;
mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::PubSub;
use redis::{Client, RedisResult};

use self::cluster::Cluster;
pub(crate) use self::replica::Acked;
pub use self::replica::ReplicaAck;
use self::server::Server;
use self::target::Target;
use crate::backend::redlock::wire::Request;
use crate::backend::redlock::wire::lock::{Acquire, Acquired, Release};
use crate::tasks::Tasks;

/// What every server of a client is built with.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) connect_timeout: Duration,
    pub(crate) tasks: Arc<Tasks>,
    /// Coalesce concurrent single-key acquires and releases (see `batch`).
    pub(crate) batching: bool,
    /// Follow every lock write with `WAIT` (see [`ReplicaAck`]).
    pub(crate) replica_ack: Option<ReplicaAck>,
    /// Where single servers' connections come from in a simulation (see
    /// `crate::sim`); TCP when `None`.
    #[cfg(feature = "sim")]
    pub(crate) dialer: Option<Arc<dyn crate::sim::Dialer>>,
}

/// One member of the quorum: an independent failure domain whose answer
/// counts once.
///
/// # Order of requests
///
/// Safety needs one ordering guarantee from a member: a request sent after
/// another one for the same key runs after it (or not at all). A failed
/// acquisition relies on it (its release must run after a SET that may
/// still be queued on a slow node), and so does every release after an
/// extend. A server keeps it on its connection (see `Server`); a Sentinel
/// member's next server holds only what the last one replicated before the
/// failover; a cluster runs a request only where its key is (see
/// `cluster`).
pub(crate) enum Node {
    /// One server: a single Redis node, or a Sentinel-managed master.
    Server(Server),
    /// A Redis Cluster.
    Cluster(Cluster),
}

impl Node {
    /// The member a node URL names (see `url` for the forms); the message
    /// of the error says what is wrong with the URL (never its password).
    pub(crate) fn open(url: &str, settings: &Settings) -> Result<Node, String> {
        url::member(url, settings)
    }

    /// A single-server member on `client`'s address.
    pub(crate) fn from_client(client: Client, settings: &Settings) -> Node {
        let client = target::with_socket_options(client);
        let info = client.get_connection_info();
        let name = format!("{}/{}", info.addr(), info.redis_settings().db());
        #[cfg(feature = "sim")]
        if let Some(dialer) = &settings.dialer {
            let dialer = Arc::clone(dialer);
            let target = Target::Dialed(dialed::Dialed { client, dialer });
            return Node::Server(Server::new(target, name, settings));
        }
        Node::Server(Server::new(Target::Fixed(client), name, settings))
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Node::Server(server) => server.name(),
            Node::Cluster(cluster) => cluster.name(),
        }
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        match self {
            Node::Server(server) => server.connect_timeout(),
            Node::Cluster(cluster) => cluster.connect_timeout(),
        }
    }

    /// Whether every script sent to this member may touch one hash slot
    /// only (a Redis Cluster).
    pub(crate) fn one_slot(&self) -> bool {
        matches!(self, Node::Cluster(_))
    }

    /// Sends `request` in request order and returns its reply; in
    /// replica-acknowledged mode, a lock write the replicas did not
    /// acknowledge is the node's error.
    pub(crate) async fn send<R: Request>(&self, request: &R) -> RedisResult<Acked<R::Reply>> {
        match self {
            Node::Server(server) => server.send(request).await,
            // Boxed: routing makes a larger future, which would otherwise
            // be part of every single server's requests too.
            Node::Cluster(cluster) => Box::pin(cluster.send(request)).await,
        }
    }

    /// Takes a lock's keys (see `Server::acquire`).
    pub(crate) async fn acquire(&self, acquire: &Acquire) -> RedisResult<Acked<Acquired>> {
        match self {
            Node::Server(server) => server.acquire(acquire).await,
            Node::Cluster(cluster) => Box::pin(cluster.acquire(acquire)).await,
        }
    }

    /// Deletes a lock's keys where they hold its token; replies how many it
    /// deleted.
    pub(crate) async fn release(&self, release: &Release) -> RedisResult<usize> {
        match self {
            Node::Server(server) => server.release(release).await,
            Node::Cluster(cluster) => Box::pin(cluster.release(release)).await,
        }
    }

    /// Sends `requests` in request order as one pipeline per server, with a
    /// reading of each server's clock (see `Server::send_pipeline`), and
    /// returns each request's own reply or error: a request refused or lost
    /// with one server of a cluster leaves the others.
    pub(crate) async fn send_pipeline<R: Request>(
        &self,
        requests: &[R],
    ) -> RedisResult<Acked<Vec<RedisResult<R::Reply>>>> {
        let requests: Vec<&R> = requests.iter().collect();
        match self {
            Node::Server(server) => server.send_pipeline(&requests).await,
            Node::Cluster(cluster) => cluster.send_pipeline(&requests).await,
        }
    }

    /// The highest rate this member's clocks can be running at against
    /// ours (seconds of its clock per second of ours), by the readings
    /// taken so far; `None` before two readings bound it. A cluster's is
    /// its fastest primary's.
    pub(crate) fn clock_rate(&self) -> Option<f64> {
        match self {
            Node::Server(server) => server.clock_rate(),
            Node::Cluster(cluster) => cluster.clock_rate(),
        }
    }

    /// Whether a reading of the member's clocks is due: `true` for one
    /// caller, who then makes it ([`Node::read_clock`]).
    pub(crate) fn clock_reading_due(&self) -> bool {
        match self {
            Node::Server(server) => server.clock_reading_due(),
            Node::Cluster(cluster) => cluster.clock_reading_due(),
        }
    }

    /// Reads the member's clocks (`TIME`) for the estimate of their rate.
    pub(crate) async fn read_clock(&self) -> RedisResult<()> {
        match self {
            Node::Server(server) => server.read_clock().await,
            Node::Cluster(cluster) => cluster.read_clock().await,
        }
    }

    /// A pub/sub connection to this member, which hears every wake-up
    /// published on it.
    pub(crate) async fn pubsub(&self) -> RedisResult<PubSub> {
        match self {
            Node::Server(server) => server.target().pubsub(server.connect_timeout()).await,
            Node::Cluster(cluster) => cluster.pubsub_client().await?.get_async_pubsub().await,
        }
    }

    /// What the member is made of, for `quorumlock check`.
    pub(crate) async fn layout(&self) -> Layout {
        match self {
            Node::Server(server) => match server.target() {
                Target::Fixed(_) => Layout::Server,
                #[cfg(feature = "sim")]
                Target::Dialed(_) => Layout::Server,
                Target::Sentinel(set) => {
                    let master = server.target().client(server.connect_timeout()).await;
                    Layout::Sentinel {
                        name: set.master().to_owned(),
                        master: master
                            .map(|client| client.get_connection_info().addr().to_string())
                            .map_err(|e| e.to_string()),
                    }
                }
            },
            Node::Cluster(cluster) => Layout::Cluster {
                primaries: cluster.shards().await,
            },
        }
    }
}

/// What the member a node URL names is made of, as it answers now: a Redis
/// Cluster's shards, a Sentinel-managed master's replicas, or one node.
///
/// # Errors
///
/// The reason, in words, when the URL is malformed or the member did not
/// answer within `connect_timeout`.
pub async fn layout_of(url: &str, connect_timeout: Duration) -> Result<Layout, String> {
    let settings = Settings {
        connect_timeout,
        tasks: Arc::default(),
        batching: false,
        replica_ack: None,
        #[cfg(feature = "sim")]
        dialer: None,
    };
    Ok(Node::open(url, &settings)?.layout().await)
}

/// What a member is made of (see [`layout_of`]).
#[derive(Debug)]
pub enum Layout {
    /// One Redis server.
    Server,
    /// A Sentinel-managed master: its name, and the address (`host:port`)
    /// of the server the sentinels name now, or why none could be found.
    Sentinel {
        /// The master's name.
        name: String,
        /// Its current server.
        master: Result<String, String>,
    },
    /// A Redis Cluster: each primary's address (`host:port`) and its slot
    /// ranges (inclusive); empty when no server of the cluster answered.
    Cluster {
        /// The primaries.
        primaries: Vec<(String, Vec<(u16, u16)>)>,
    },
}

impl Layout {
    /// The primary (`host:port`) that serves `key`'s hash slot on a cluster;
    /// `None` for another member, or when no primary serves that slot.
    pub fn primary_of(&self, key: &str) -> Option<&str> {
        let Layout::Cluster { primaries } = self else {
            return None;
        };
        let slot = crate::backend::redlock::wire::keys::slot(key);
        primaries
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|&(first, last)| (first..=last).contains(&slot)))
            .map(|(address, _)| address.as_str())
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Node").field(&self.name()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::redlock::wire::lock::AcquireMode;

    /// Every lock operation builds one request future per node and boxes
    /// it (see `quorum::gather`), and its size is copied and allocated per
    /// node and operation. glibc serves small allocations from a per-thread
    /// cache; larger ones take its general path, which is measurably slower
    /// under load (docs/benchmarks.md has the sizes and the measurement). Under load nearly every request waits
    /// in its node's batch queue, which needs little state; sending a
    /// request directly (the connection's ordered hand-over) needs more and
    /// is boxed on its own (`batch::submit`, `Server::send_direct`), and so is
    /// every request to a Redis Cluster member. The limit
    /// keeps the futures small, with room to grow.
    #[test]
    fn request_futures_stay_small() {
        const LIMIT: usize = 512;
        let settings = Settings {
            connect_timeout: Duration::from_secs(1),
            tasks: Arc::default(),
            batching: true,
            replica_ack: None,
            #[cfg(feature = "sim")]
            dialer: None,
        };
        let node = Node::open("redis://127.0.0.1:1/", &settings).expect("a valid URL");
        let keys: Arc<[String]> = Arc::from(["k".to_owned()]);
        let token: Arc<str> = Arc::from("token");
        let acquire = Acquire {
            keys: Arc::clone(&keys),
            token: Arc::clone(&token),
            ttl_ms: 1000,
            mode: AcquireMode::Plain,
        };
        let release = Release::new(keys, token);
        let sizes = (
            size_of_val(&node.send(&acquire)),
            size_of_val(&node.send(&release)),
        );
        assert!(
            sizes.0 <= LIMIT && sizes.1 <= LIMIT,
            "acquire, release: {sizes:?} bytes"
        );
    }
}
