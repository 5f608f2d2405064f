//! A node's one request connection: the ordered hand-over of requests to
//! it (see [`Node`](super::Node)), (re)connecting, and watching that it
//! still answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisResult, ServerErrorKind, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::target::Target;
use crate::backend::redlock::wire::{self, wrong_reply_count};
use crate::config::STALL_FLOOR;

/// A reply on its way from the node.
type PendingReply<R> = Pin<Box<dyn Future<Output = RedisResult<R>> + Send>>;

/// A request handed over to a connection, its reply still to come (or
/// already there).
pub(crate) struct Started<R> {
    /// The connection's health, which a reply that shows it broken marks
    /// (see [`Conn::settle`]).
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

    /// Sends `cmd` in request order (see the type docs) and awaits its reply.
    ///
    /// A node that is down fails the request at once (connection refused)
    /// or after the connect timeout; the next request tries to connect
    /// again, so a restarted node takes part as soon as it is back.
    pub(crate) async fn send(&self, cmd: Cmd) -> RedisResult<Value> {
        self.hand_over(move |mut conn| async move { conn.send_packed_command(&cmd).await })
            .await
    }

    /// Sends the commands of `pipe` in request order as one unit on one
    /// connection and awaits their replies (server errors stay in the list).
    pub(crate) async fn send_pipeline(&self, pipe: Pipeline) -> RedisResult<Vec<Value>> {
        let count = pipe.len();
        let replies = self
            .hand_over(move |mut conn| async move { conn.send_packed_commands(&pipe, 0, count).await })
            .await?;
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
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<R>> + Send + 'static,
    {
        let started = self.start(request).await?;
        self.finish(started).await
    }

    /// Hands the commands of `pipe` over as one unit (their place in the
    /// node's order is fixed when this returns) without waiting for the
    /// replies (server errors stay in the list); see [`Conn::finish`].
    pub(crate) async fn start_pipeline(&self, pipe: Pipeline) -> RedisResult<Started<Vec<Value>>> {
        let count = pipe.len();
        self.start(move |mut conn| async move { conn.send_packed_commands(&pipe, 0, count).await })
            .await
    }

    /// The first half of [`Conn::hand_over`]: connects if needed and hands
    /// the request over under the fair lock.
    async fn start<R, F, Fut>(&self, request: F) -> RedisResult<Started<R>>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
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
        let live = match slot.take() {
            Some(live) => live,
            // Boxed: connecting and loading the scripts is a large future
            // (kilobytes) that, kept inline, would be part of every
            // request's future, which is built, boxed and moved on every
            // lock operation; it runs once per connection. Still under the
            // lock: nothing is handed to this connection before the scripts
            // are there (see `crate::backend::redlock::wire`).
            None => Box::pin(self.connect()).await?,
        };
        let health = Arc::clone(&live.health);
        let conn = live.conn.clone();
        let mut in_flight = InFlight::new(Arc::clone(&live.health));
        *slot = Some(live);
        let request = request(conn);
        let mut reply: PendingReply<R> = Box::pin(async move {
            let result = tokio::select! {
                biased;
                result = request => result,
                () = in_flight.health.retired.cancelled() => return Err(retired()),
            };
            in_flight.answered();
            result
        });
        // The first poll hands the command to the connection's writer
        // queue (or takes a place in its fair wait for room): this fixes
        // its position before the next request may go. Unconstrained by
        // Tokio's cooperative budget: with the task's budget used up, the
        // channel send inside would answer "not yet" after taking its
        // permit but before queueing the command, and a request let in
        // after us could overtake it.
        let reply = match futures::poll!(tokio::task::unconstrained(reply.as_mut())) {
            Poll::Ready(result) => Ok(result),
            Poll::Pending => Err(reply),
        };
        Ok(Started { health, reply })
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
    /// request handed over by [`Conn::start_command`].
    pub(crate) async fn finish<R: Reply>(&self, started: Started<R>) -> RedisResult<R> {
        let result = match started.reply {
            Ok(result) => result,
            Err(mut pending) => pending.as_mut().await,
        };
        settle(&started.health, result)
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

/// Whether a connection still answers: what [`Conn::stall_limit`] is
/// measured on.
struct Health {
    /// The base of `progress_us`.
    since: Instant,
    /// Requests handed to the connection that neither got their reply nor
    /// were given up (dropped) by their caller.
    outstanding: AtomicUsize,
    /// When the connection last showed it works, in µs after `since`: its
    /// last reply while other requests were waiting, or when it went from
    /// idle to busy (an idle connection has nothing to answer, and the next
    /// request starts the wait afresh, so the reply that leaves it idle
    /// need not read the clock).
    progress_us: AtomicU64,
    /// Replies received: progress that [`Conn::replace_if_silent`] sees even
    /// where `progress_us` was not moved.
    answers: AtomicU64,
    /// Cancelled when the connection is retired: its requests still waiting
    /// fail at once (see [`Conn::replace_if_silent`]).
    retired: CancellationToken,
    /// A reply showed the connection unusable (see [`settle`]).
    broken: AtomicBool,
}

impl Health {
    fn new() -> Self {
        Health {
            since: Instant::now(),
            outstanding: AtomicUsize::new(0),
            progress_us: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            retired: CancellationToken::new(),
            broken: AtomicBool::new(false),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// What shows progress: when the wait last started afresh, and how many
    /// replies came.
    fn progress(&self) -> (u64, u64) {
        (
            self.progress_us.load(Ordering::Acquire),
            self.answers.load(Ordering::Acquire),
        )
    }

    /// Starts the wait for progress afresh.
    fn restart(&self) {
        self.progress_us.store(self.now_us(), Ordering::Release);
    }

    /// Requests are waiting and nothing came back for `limit`.
    fn stalled(&self, limit: Duration) -> bool {
        let limit_us = u64::try_from(limit.as_micros()).unwrap_or(u64::MAX);
        self.outstanding.load(Ordering::Acquire) > 0
            && self
                .now_us()
                .saturating_sub(self.progress_us.load(Ordering::Acquire))
                >= limit_us
    }
}

/// One request counted in [`Health::outstanding`] until it is answered or
/// dropped.
struct InFlight {
    health: Arc<Health>,
    answered: bool,
}

impl InFlight {
    fn new(health: Arc<Health>) -> Self {
        if health.outstanding.fetch_add(1, Ordering::AcqRel) == 0 {
            health.restart();
        }
        InFlight {
            health,
            answered: false,
        }
    }

    /// The connection answered this request.
    fn answered(&mut self) {
        self.health.answers.fetch_add(1, Ordering::AcqRel);
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Decided on the count this request leaves, atomically with leaving
        // it: either another request still waits and this reply is its
        // progress, or the connection went idle and the next request starts
        // the wait afresh (`InFlight::new`); a request handed over at this
        // moment is covered by one of the two.
        let others = self.health.outstanding.fetch_sub(1, Ordering::AcqRel) - 1;
        if self.answered && others > 0 {
            self.health.restart();
        }
    }
}

/// The error of a request whose connection was retired before it answered
/// (see [`Conn::replace_if_silent`]): whether it ran is unknown.
fn retired() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "connection retired",
        "it answered nothing while a new connection to the node did".to_owned(),
    ))
}

/// A reply as [`Conn::settle`] checks it.
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

/// `NOSCRIPT` or `READONLY` (see [`Conn::settle`]).
fn is_stale(error: &redis::RedisError) -> bool {
    matches!(
        error.kind(),
        redis::ErrorKind::Server(ServerErrorKind::NoScript | ServerErrorKind::ReadOnly)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection with requests waiting is stalled only once nothing came
    /// back for the limit; a reply while others wait is progress for them.
    #[tokio::test(start_paused = true)]
    async fn a_reply_is_progress_for_the_requests_still_waiting() {
        let limit = Duration::from_secs(1);
        let health = Arc::new(Health::new());
        let mut first = InFlight::new(Arc::clone(&health));
        let second = InFlight::new(Arc::clone(&health));
        tokio::time::advance(limit).await;
        assert!(health.stalled(limit), "two waiting, nothing back");
        let before = health.progress();
        first.answered();
        drop(first);
        assert_ne!(health.progress(), before);
        assert!(!health.stalled(limit), "the reply restarted the second's wait");
        tokio::time::advance(limit).await;
        assert!(health.stalled(limit));
        drop(second);
        assert!(!health.stalled(limit), "an idle connection has nothing to answer");
        let _next = InFlight::new(Arc::clone(&health));
        assert!(
            !health.stalled(limit),
            "a request to an idle connection starts afresh"
        );
    }

    /// A reply that leaves the connection idle still counts (see
    /// `Conn::replace_if_silent`), though it does not read the clock.
    #[tokio::test(start_paused = true)]
    async fn a_reply_that_leaves_the_connection_idle_still_counts_as_progress() {
        let health = Arc::new(Health::new());
        let mut only = InFlight::new(Arc::clone(&health));
        tokio::time::advance(Duration::from_secs(1)).await;
        let before = health.progress();
        only.answered();
        drop(only);
        assert_ne!(health.progress(), before);
    }
}
