//! One Redis server: its connection, the order of its requests, batching,
//! replica acknowledgement and the rate of its clock.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{RedisResult, Value};
use tokio::time::Instant;

use super::Settings;
use super::batch::{self, Batcher};
use super::clock::ClockRate;
use super::conn::Conn;
use super::replica::{Acked, ReplicaAck};
use super::target::Target;
use crate::backend::redlock::wire::batch::Op;
use crate::backend::redlock::wire::clock::Time;
use crate::backend::redlock::wire::lock::{Acquire, Acquired, Release};
use crate::backend::redlock::wire::{self, Request};
use crate::tasks::Tasks;

/// One Redis server that takes locks: a single-node member, a member's
/// Sentinel-managed master, or a shard primary of a Redis Cluster member.
///
/// # Order of requests
///
/// Safety needs one ordering guarantee from this type: a request sent after
/// another one runs after it on the node. A failed acquisition relies on it
/// (its release must run after a SET that may still be queued on a slow
/// node), and so does every release after an extend.
///
/// Redis runs the commands of one connection in the order it reads them, and
/// the redis crate's multiplexed connection writes them in the order they
/// were handed to it. What remains is to hand them over in the order the
/// requests were made, also while the connection is being (re)established,
/// when a crate-level reconnecting manager lets waiting requests go in any
/// order. So every request takes a fair (first come, first served) lock,
/// connects if needed, hands its command to the connection, and only then
/// lets the next request in. The lock is never held while waiting for a reply.
/// A connection with requests still waiting on it is replaced only when
/// those can no longer run after the requests that follow: it broke, or it
/// stayed silent while a new connection to the node answered (see
/// `Conn::replace_if_silent`).
///
/// In replica-acknowledged mode ([`ReplicaAck`]) a lock write and its `WAIT`
/// are handed over as one pipeline, so that they share a connection.
pub(crate) struct Server {
    /// `host:port/db` for messages; never contains the password.
    name: String,
    connect_timeout: Duration,
    conn: Arc<Conn>,
    mode: Mode,
    /// Readings of the server's clock, for its rate.
    clock: ClockRate,
    /// The target's [`Target::changes`] the readings were taken under.
    clock_source: AtomicU64,
}

/// How a node sends lock writes, chosen once when the client is built.
enum Mode {
    /// Each request as a command of its own.
    Direct,
    /// Concurrent single-key acquires and releases are coalesced (see
    /// `batch`).
    Batched(Arc<Batcher>),
    /// Every lock write is followed by `WAIT` in one pipeline, so it goes on
    /// its own; a release writes no lock and may still be coalesced.
    ReplicaAck {
        ack: ReplicaAck,
        releases: Option<Arc<Batcher>>,
    },
}

impl Mode {
    fn new(batching: bool, replica_ack: Option<ReplicaAck>, tasks: Arc<Tasks>) -> Mode {
        let batcher = batching.then(|| Arc::new(Batcher::new(tasks)));
        match (replica_ack, batcher) {
            (Some(ack), releases) => Mode::ReplicaAck { ack, releases },
            (None, Some(batcher)) => Mode::Batched(batcher),
            (None, None) => Mode::Direct,
        }
    }

    /// The batcher a plain single-key acquire may join.
    fn acquires(&self) -> Option<&Arc<Batcher>> {
        match self {
            Mode::Batched(batcher) => Some(batcher),
            Mode::Direct | Mode::ReplicaAck { .. } => None,
        }
    }

    /// The batcher a single-key release may join.
    fn releases(&self) -> Option<&Arc<Batcher>> {
        match self {
            Mode::Batched(batcher)
            | Mode::ReplicaAck {
                releases: Some(batcher),
                ..
            } => Some(batcher),
            Mode::Direct | Mode::ReplicaAck { releases: None, .. } => None,
        }
    }

    /// The `WAIT` that follows each lock write, in replica-acknowledged mode.
    fn ack(&self) -> Option<ReplicaAck> {
        match self {
            Mode::ReplicaAck { ack, .. } => Some(*ack),
            Mode::Direct | Mode::Batched(_) => None,
        }
    }
}

impl Server {
    /// A server that connects on first use (building a client needs
    /// neither a runtime nor a reachable server), named `name` in messages.
    pub(crate) fn new(target: Target, name: String, settings: &Settings) -> Self {
        // A `WAIT` holds back every later reply on its connection: the
        // stall limit must allow for it.
        let wait = settings.replica_ack.map(|ack| ack.timeout());
        Server {
            name,
            connect_timeout: settings.connect_timeout,
            conn: Arc::new(Conn::new(target, settings.connect_timeout, wait)),
            mode: Mode::new(
                settings.batching,
                settings.replica_ack,
                Arc::clone(&settings.tasks),
            ),
            clock: ClockRate::default(),
            clock_source: AtomicU64::new(0),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Where the server's connections go (also those of pub/sub).
    pub(crate) fn target(&self) -> &Target {
        self.conn.target()
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Sends `request` in request order (see the type docs) and returns its
    /// reply; in replica-acknowledged mode, a lock write the replicas did
    /// not acknowledge is the node's error.
    pub(crate) async fn send<R: Request>(&self, request: &R) -> RedisResult<Acked<R::Reply>> {
        // Boxed: kept inline, the larger state of this path would be part of
        // every request's future, batched ones included (each is built and
        // boxed per node and operation; a large allocation leaves the
        // allocator's fast path: the `request_futures_stay_small` test).
        let (reply, acked) = Box::pin(self.send_direct(request)).await?;
        Ok(acked.map(|()| reply))
    }

    /// Sends `request` as a command of its own; in replica-acknowledged
    /// mode a lock write goes in one pipeline with its `WAIT`. Returns the
    /// reply and whether the replicas acknowledged it (always outside that
    /// mode).
    async fn send_direct<R: Request>(&self, request: &R) -> RedisResult<(R::Reply, Acked<()>)> {
        let ack = self.mode.ack().filter(|_| request.writes_lock());
        let Some(ack) = ack else {
            let reply = self.conn.send(|| request.command()).await?;
            return Ok((request.parse(reply)?, Ok(())));
        };
        let mut pipe = redis::pipe();
        pipe.add_command(request.command()).add_command(ack.wait());
        let [reply, wait] = <[Value; 2]>::try_from(self.conn.send_pipeline(pipe).await?)
            .map_err(|_| wire::wrong_reply_count())?;
        Ok((request.parse(reply)?, ack.check(wait)))
    }

    /// Takes a lock's keys: in the next batch when batching and the acquire
    /// is a plain one, else on its own. In replica-acknowledged mode a
    /// grant the replicas did not acknowledge is taken back before the node
    /// reports their absence, so that a node that counts as failed keeps no
    /// key of ours even if the attempt succeeds.
    pub(crate) async fn acquire(&self, acquire: &Acquire) -> RedisResult<Acked<Acquired>> {
        if let Some(batcher) = self.mode.acquires()
            && let Some(op) = Op::acquire(acquire)
        {
            let granted = batch::submit(batcher, &self.conn, op).await?;
            return Ok(Ok(Acquired { granted, fence: None }));
        }
        // Boxed for the reason `send` boxes.
        let (acquired, acked) = Box::pin(self.send_direct(acquire)).await?;
        match acked {
            Err(missing) if acquired.granted => {
                let undo = Release::new(Arc::clone(&acquire.keys), Arc::clone(&acquire.token));
                let undone = Box::pin(self.conn.send(|| undo.command())).await;
                if let Err(error) = undone.and_then(|reply| undo.parse(reply)) {
                    tracing::debug!(node = self.name(), %error, "release of an unacknowledged grant failed");
                }
                Ok(Err(missing))
            }
            acked => Ok(acked.map(|()| acquired)),
        }
    }

    /// Deletes a lock's keys where they hold its token (in the next batch
    /// when batching and single-key); replies how many it deleted.
    pub(crate) async fn release(&self, release: &Release) -> RedisResult<usize> {
        if let Some(batcher) = self.mode.releases()
            && let Some(op) = Op::release(release)
        {
            return Ok(usize::from(batch::submit(batcher, &self.conn, op).await?));
        }
        // A release writes no lock: never followed by `WAIT`.
        Ok(self.send(release).await?.unwrap_or_default())
    }

    /// The highest rate this node's clock can be running at against ours
    /// (seconds of its clock per second of ours), by the readings taken so
    /// far; `None` before two readings bound it.
    pub(crate) fn clock_rate(&self) -> Option<f64> {
        self.clock.fastest()
    }

    /// Whether a reading of this node's clock is due: `true` for one caller,
    /// who then makes it ([`Server::read_clock`]).
    pub(crate) fn clock_reading_due(&self) -> bool {
        self.clock.claim_reading()
    }

    /// Reads the node's clock (`TIME`) for the estimate of its rate.
    pub(crate) async fn read_clock(&self) -> RedisResult<()> {
        let sent = Instant::now();
        let reply = self.conn.send(|| Time.command()).await?;
        let received = Instant::now();
        self.record_clock(sent, received, Time.parse(reply)?);
        Ok(())
    }

    /// Sends `requests` in request order as one pipeline (one round trip),
    /// followed by one `WAIT` in replica-acknowledged mode when they write
    /// locks; each request gets its own reply or error, but a write the
    /// replicas did not acknowledge fails them all. The
    /// pipeline starts with a reading of the node's clock (`TIME`), for the
    /// estimate of its rate ([`Server::clock_rate`]): the watchdog's renewals
    /// take one per node and round without a round trip of their own.
    pub(crate) async fn send_pipeline<R: Request>(
        &self,
        requests: &[&R],
    ) -> RedisResult<Acked<Vec<RedisResult<R::Reply>>>> {
        let ack = self
            .mode
            .ack()
            .filter(|_| requests.iter().any(|request| request.writes_lock()));
        let mut pipe = redis::pipe();
        pipe.add_command(Time.command());
        for request in requests {
            pipe.add_command(request.command());
        }
        if let Some(ack) = &ack {
            pipe.add_command(ack.wait());
        }
        let sent = Instant::now();
        let mut replies = self.conn.send_pipeline(pipe).await?.into_iter();
        let received = Instant::now();
        let node_us = Time.parse(replies.next().ok_or_else(wire::wrong_reply_count)?)?;
        self.record_clock(sent, received, node_us);
        let mut replies: Vec<Value> = replies.collect();
        let acked = match &ack {
            Some(ack) => ack.check(replies.pop().ok_or_else(wire::wrong_reply_count)?),
            None => Ok(()),
        };
        if replies.len() != requests.len() {
            return Err(wire::wrong_reply_count());
        }
        let parsed = requests
            .iter()
            .zip(replies)
            .map(|(request, reply)| request.parse(reply))
            .collect();
        Ok(acked.map(|()| parsed))
    }
}

impl Server {
    /// Records a reading of the clock, forgetting those of another server
    /// (see [`Target::changes`]).
    fn record_clock(&self, sent: Instant, received: Instant, node_us: u64) {
        let source = self.conn.target().changes();
        if self.clock_source.swap(source, Ordering::Relaxed) != source {
            self.clock.forget();
        }
        self.clock.record(sent, received, node_us);
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Server").field(&self.name).finish()
    }
}
