//! A node's one request connection: the ordered hand-over of requests to
//! it (see [`Node`](super::Node)), (re)connecting, and watching that it
//! still answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisResult, ServerErrorKind, Value};
use tokio::sync::Mutex;
use tokio_util::task::AbortOnDropHandle;

use super::health::{Health, InFlight, Watched};
use super::target::Target;
use crate::backend::redlock::wire::{self, wrong_reply_count};
use crate::config::STALL_FLOOR;

/// A reply on its way from the node.
type PendingReply<R> = Pin<Box<dyn Future<Output = RedisResult<R>> + Send>>;

/// A request handed over to a connection, its reply still to come (or
/// already there).
pub(crate) struct Started<R> {
    /// The connection's health, which a reply that shows it broken marks
    /// (see [`settle`]).
    health: Arc<Health>,
    reply: Result<RedisResult<R>, PendingReply<R>>,
}

/// The node's one request connection and the ordered hand-over to it
/// (see [`Node`](super::Node)); shared with the batcher's background flushes.
pub(crate) struct Conn {
    target: Target,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    /// See [`Conn::stall_limit`].
    stall_limit: Duration,
    /// The live connection, if any.
    slot: Mutex<Option<Live>>,
}

/// A connection and what tells whether it still works.
struct Live {
    conn: MultiplexedConnection,
    health: Arc<Health>,
    /// A task that never ends, spawned on the runtime that drives the
    /// connection's I/O: it counts as finished once that runtime is gone
    /// (a client kept in a `static` across `#[tokio::test]`s, one runtime
    /// per job), and the connection with it. Checked on every request, so
    /// that the first request on a new runtime reconnects instead of failing.
    runtime_alive: AbortOnDropHandle<()>,
}

impl Conn {
    pub(crate) fn new(target: Target, connect_timeout: Duration, replica_wait: Option<Duration>) -> Self {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // The quorum layer bounds every request with its own deadline; a
            // release may rightly wait longer than any default here.
            .set_response_timeout(None);
        Conn {
            target,
            config,
            connect_timeout,
            stall_limit: Conn::stall_limit(connect_timeout, replica_wait),
            slot: Mutex::new(None),
        }
    }

    /// Where this connection goes.
    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// How long a connection may leave its requests unanswered, with no
    /// reply at all, before the node checks whether it still works (see
    /// [`Conn::replace_if_silent`]).
    ///
    /// The quorum layer gives up on a request at its deadline by no longer
    /// polling it, which tells the connection nothing: a connection whose
    /// flow died silently (no reset ever arrives) would stay in use, every
    /// request on it timing out, until the kernel gives up after minutes.
    /// So the node watches its own requests: the time since the connection
    /// last answered anything while requests were waiting. The limit is the
    /// connect timeout, the time a new connection is given to answer (so a
    /// connection silent for that long is no better than a new one), and at
    /// least [`STALL_FLOOR`]; in replica-acknowledged mode at least the
    /// `WAIT` timeout, which holds back every later reply of its connection.
    /// Measured on the hot path with a few atomic operations and two clock
    /// reads per request, no timer and no extra command.
    fn stall_limit(connect_timeout: Duration, replica_wait: Option<Duration>) -> Duration {
        connect_timeout
            .max(STALL_FLOOR)
            .max(replica_wait.unwrap_or_default())
    }

    /// Sends the command `command` builds in request order (see the type
    /// docs) and awaits its reply.
    ///
    /// A node that is down fails the request at once (connection refused)
    /// or after the connect timeout; the next request tries to connect
    /// again, so a restarted node takes part as soon as it is back.
    ///
    /// `command` builds the command: once, or twice when the first found
    /// its connection closed (see [`Conn::start`]).
    pub(crate) async fn send(&self, command: impl Fn() -> Cmd) -> RedisResult<Value> {
        self.hand_over(|mut conn| {
            let cmd = command();
            async move { conn.send_packed_command(&cmd).await }
        })
        .await
    }

    /// Sends the commands of `pipe` in request order as one unit on one
    /// connection and awaits their replies (server errors stay in the list).
    pub(crate) async fn send_pipeline(&self, pipe: Pipeline) -> RedisResult<Vec<Value>> {
        let count = pipe.len();
        let replies = self.hand_over(sending(pipe)).await?;
        if replies.len() != count {
            return Err(wrong_reply_count());
        }
        Ok(replies)
    }

    /// Runs `request` on the connection in request order (see the type
    /// docs): under the fair lock until its first poll has handed the
    /// commands over, then without it until the reply.
    async fn hand_over<R: Reply, F, Fut>(&self, request: F) -> RedisResult<R>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<R>> + Send + 'static,
    {
        let started = self.start(request).await?;
        self.finish(started).await
    }

    /// Hands the commands of `pipe` over as one unit (their place in the
    /// node's order is fixed when this returns) without waiting for the
    /// replies (server errors stay in the list); see [`Conn::finish`].
    pub(crate) async fn start_pipeline(&self, pipe: Pipeline) -> RedisResult<Started<Vec<Value>>> {
        self.start(sending(pipe)).await
    }

    /// The first half of [`Conn::hand_over`]: connects if needed and hands
    /// the request over under the fair lock.
    ///
    /// A connection the node closed while it sat idle (a restart, an idle
    /// timeout, a reset) is found closed only by the request handed to it,
    /// which fails on its first poll, before it reached the socket. That
    /// request goes again on a new connection, still under the lock (so in
    /// its place in the order): otherwise every client's first request
    /// after a node restart would count that node as failed, and a client
    /// of one node would report it unreachable while it is up. (On a
    /// multi-threaded runtime the connection's I/O task could, in the few
    /// instructions between the hand-over and that poll, write the request
    /// and then read the close; the commands sent here are reads and
    /// owner-checked writes of this client's own token, which a second run
    /// leaves as the first left them.)
    async fn start<R, F, Fut>(&self, request: F) -> RedisResult<Started<R>>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<R>> + Send + 'static,
    {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|live| {
            live.runtime_alive.is_finished() || live.health.broken.load(Ordering::Acquire)
        }) {
            *slot = None;
        }
        if slot
            .as_ref()
            .is_some_and(|live| live.health.stalled(self.stall_limit))
        {
            // Boxed for the reason `connect` is: rare and large.
            Box::pin(self.replace_if_silent(&mut slot)).await;
        }
        // At most twice: again only when the first found its connection
        // closed (see above).
        let mut again = false;
        loop {
            let (live, fresh) = match slot.take() {
                Some(live) => (live, false),
                // Boxed: connecting and loading the scripts is a large
                // future (kilobytes) that, kept inline, would be part of
                // every request's future, which is built, boxed and moved
                // on every lock operation; it runs once per connection.
                // Still under the lock: nothing is handed to this
                // connection before the scripts are there (see
                // `crate::backend::redlock::wire`).
                None => (Box::pin(self.connect()).await?, true),
            };
            let health = Arc::clone(&live.health);
            let in_flight = InFlight::new(Arc::clone(&live.health));
            let conn = live.conn.clone();
            *slot = Some(live);
            // Built in place: a request's future is large (the redis
            // crate's send is over a kilobyte), and each move copies it.
            let mut reply: PendingReply<R> = Box::pin(Watched::new(request(conn), in_flight));
            // The first poll hands the command to the connection's writer
            // queue (or takes a place in its fair wait for room): this
            // fixes its position before the next request may go.
            // Unconstrained by Tokio's cooperative budget: with the task's
            // budget used up, the channel send inside would answer "not
            // yet" after taking its permit but before queueing the
            // command, and a request let in after us could overtake it.
            let started = match futures::poll!(tokio::task::unconstrained(reply.as_mut())) {
                Poll::Ready(result) => Started {
                    health,
                    reply: Ok(result),
                },
                Poll::Pending => Started {
                    health,
                    reply: Err(reply),
                },
            };
            if fresh || again || !started.found_closed() {
                return Ok(started);
            }
            tracing::debug!(node = ?self.target.last_address(), "connection found closed: reconnecting");
            *slot = None;
            again = true;
        }
    }

    /// Opens a connection and loads the scripts on it.
    async fn connect(&self) -> RedisResult<Live> {
        let mut conn = self.target.connect(self.connect_timeout, &self.config).await?;
        let load = wire::load_all();
        wire::check_loaded(conn.send_packed_commands(&load, 0, load.len()).await?)?;
        Ok(Live {
            conn,
            health: Arc::new(Health::new()),
            runtime_alive: AbortOnDropHandle::new(tokio::spawn(std::future::pending())),
        })
    }

    /// The live connection in `slot` has stalled (see
    /// [`Conn::stall_limit`]): replaces it by a new one if the node answers
    /// a new connection while the old one stays silent.
    ///
    /// The new connection is the probe: connecting and loading the scripts
    /// take a few round trips and need the node to run commands. So a node
    /// that is paused or busy (a long script), or a path on which new
    /// connections fail too, keeps its connection: its requests may still
    /// run, and a new connection would let later requests overtake them
    /// (Redis orders only the commands of one connection). If the new
    /// connection answers while the old one made no progress at all, the
    /// old flow is what is broken (half-open behind a firewall, a
    /// black-holed path): it is retired, and its requests still waiting fail
    /// at once, which drops its last handles and closes it with a reset (see
    /// [`with_socket_options`](super::target::with_socket_options)), so that nothing it still had to send can
    /// reach the node after the requests that follow on the new one. No
    /// request pays for this check but the first after a stall.
    async fn replace_if_silent(&self, slot: &mut Option<Live>) {
        let Some(progress) = slot.as_ref().map(|live| live.health.progress()) else {
            return;
        };
        let probe = tokio::time::timeout(self.connect_timeout, self.connect()).await;
        let Some(stalled) = slot.as_ref() else {
            return;
        };
        match probe {
            Ok(Ok(fresh)) if stalled.health.progress() == progress => {
                tracing::warn!(
                    node = ?self.target.last_address(),
                    silent_for = ?self.stall_limit,
                    "connection gave no reply while a new one answered: replaced"
                );
                stalled.health.retired.cancel();
                *slot = Some(fresh);
            }
            // The old connection answered meanwhile: it works, and keeping
            // it keeps the order of its requests. The probe is closed.
            Ok(Ok(_)) => {}
            // No answer on a new connection either: probe again only after
            // another stall limit, so that a paused node is not sent a new
            // connection by every request.
            Ok(Err(_)) | Err(_) => stalled.health.restart(),
        }
    }

    /// The second half of [`Conn::hand_over`]: awaits the reply of a
    /// request handed over by [`Conn::start`].
    pub(crate) async fn finish<R: Reply>(&self, started: Started<R>) -> RedisResult<R> {
        let result = match started.reply {
            Ok(result) => result,
            Err(mut pending) => pending.as_mut().await,
        };
        settle(&started.health, result)
    }
}

/// A request that sends `pipe`'s commands as one unit (see [`Conn::start`]
/// for why it may be sent twice).
fn sending(pipe: Pipeline) -> impl Fn(MultiplexedConnection) -> PendingReply<Vec<Value>> {
    let (count, pipe) = (pipe.len(), Arc::new(pipe));
    move |mut conn| {
        let pipe = Arc::clone(&pipe);
        Box::pin(async move { conn.send_packed_commands(&pipe, 0, count).await })
    }
}

impl<R> Started<R> {
    /// Whether the request failed on its first poll because its connection
    /// had already closed: it never reached the socket (the connection's
    /// writer takes requests only while it runs, and it stops at the first
    /// sign of a closed connection, before writing anything more).
    fn found_closed(&self) -> bool {
        matches!(&self.reply, Ok(Err(error)) if error.is_connection_dropped())
    }
}

/// Marks the connection broken after an error that leaves it unusable, so
/// that the next request replaces it (in [`Conn::start`], under the lock).
///
/// Marked, not dropped here: dropping it needs the lock, and a finished
/// request that queued for the lock could be handed it while its owner
/// waits elsewhere (the batcher awaits its next hand-over before it polls
/// the replies of the batches in flight), holding up every request behind
/// it for good.
///
/// A `NOSCRIPT` reply (someone ran `SCRIPT FLUSH`; the command did not
/// run) marks it too: the next connection loads the scripts again. So
/// does `READONLY`: the server became a replica (a failover), and a
/// Sentinel-managed member's next connection goes to the new master.
fn settle<R: Reply>(health: &Health, result: RedisResult<R>) -> RedisResult<R> {
    let broken = match &result {
        Err(e) => e.is_unrecoverable_error() || e.is_connection_dropped() || is_stale(e),
        Ok(reply) => reply.no_script(),
    };
    if broken {
        health.broken.store(true, Ordering::Release);
    }
    result
}

/// A reply as [`settle`] checks it.
pub(crate) trait Reply {
    /// The node answered `NOSCRIPT`: it has lost our scripts.
    fn no_script(&self) -> bool;
}

impl Reply for Value {
    fn no_script(&self) -> bool {
        matches!(self, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
    }
}

impl Reply for Vec<Value> {
    fn no_script(&self) -> bool {
        self.iter().any(Reply::no_script)
    }
}

/// `NOSCRIPT` or `READONLY` (see [`settle`]).
fn is_stale(error: &redis::RedisError) -> bool {
    matches!(
        error.kind(),
        redis::ErrorKind::Server(ServerErrorKind::NoScript | ServerErrorKind::ReadOnly)
    )
}
