//! Every default and every timing rule of the library, each a named
//! constant with the reason for its value. The public ones are the
//! defaults a caller can override (builder, lock options); the others are
//! rules the library keeps itself.
//!
//! The figures behind the choices (benchmarks, measurements) are in
//! docs/benchmarks.md and docs/how-it-works.md, not here.

use std::time::Duration;

// Defaults of the client (see `RedlockBuilder`).
/// Default lock ttl for callers that have no better figure (the CLI, examples).
///
/// Long enough that a renewal or two can fail without losing the lock, short
/// enough that a crashed holder blocks others for half a minute at most.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Longest ttl a lock may have, and longest node, connect or drift time.
///
/// A lease that outlives a crashed holder by more than a year is not a
/// lease; hold longer with renewal. The bound keeps every deadline the
/// library computes (start + ttl on the monotonic clock, now + ttl in
/// milliseconds on the nodes) far from overflow, so that an absurd setting
/// is an [`Error::Config`](crate::Error::Config), never a panic.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Default time each node has to answer one request.
///
/// Small next to the ttl (0.3 % of [`DEFAULT_TTL`]) so that a dead or paused
/// node costs an acquisition little validity, as the Redlock description asks
/// (5-50 ms for a 10 s ttl on a LAN); large enough for a cross-zone round trip
/// on a busy host. Raise it for nodes far away.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// Default time to establish a connection to a node (TCP, TLS, AUTH).
///
/// Larger than the per-node timeout because a handshake costs several round
/// trips. A connection is set up by the first request that needs it; an
/// acquire or extend gives up on it at its per-node deadline (the next
/// request starts over), while a release, driven for up to the lock's ttl,
/// can wait for it to complete.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Default clock drift allowance as a fraction of the ttl (1 %).
///
/// Nodes expire keys on their own clocks. The reference Redlock implementation
/// assumes they may run up to 1 % fast relative to ours.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// Default fixed part of the drift allowance (2 ms).
///
/// Redis expires keys with millisecond resolution, and expiry checks are not
/// instantaneous; the reference implementation adds 2 ms for that.
pub const DEFAULT_DRIFT_FIXED: Duration = Duration::from_millis(2);

/// Whether renewals re-create a lock's key on a node that lost it (default on).
///
/// A node restarted without persistence comes back empty; while we still hold
/// a majority elsewhere, setting our key there again (`SET NX`, same token)
/// restores the margin the lock had. It never overwrites another owner's key.
pub const DEFAULT_HEAL: bool = true;

/// Whether concurrent single-key acquires and releases to a node are
/// coalesced into one pipeline, the releases into one script call (default
/// on).
///
/// A lone caller is never delayed: while few requests are in flight to a
/// node, each goes at once as a single command. Beyond that, the requests
/// that queue while a batch is in flight go together in the next batch,
/// which saves the client a write and a hand-over per request and the
/// servers a script call per release when many tasks lock at once
/// (docs/benchmarks.md has the figures).
///
/// Turn it off for nodes that are Redis Cluster members (a batch mixes keys
/// of any hash slot), and where a few loops drive many futures from one
/// task, where it does not pay.
pub const DEFAULT_BATCHING: bool = true;

/// Default time a node waits for its replicas to acknowledge a lock write.
///
/// A replica on the same network applies a write and answers the master's
/// acknowledgement request within a millisecond or two; one that needs 50 ms
/// is lagging, and a lock it has not seen would be lost if it were promoted.
/// Half of [`crate::DEFAULT_NODE_TIMEOUT`], so that a `WAIT` that runs its full
/// course still answers inside the per-node budget, with room left for the
/// round trip that carries the write and the `WAIT`, and for the delete that
/// follows an unacknowledged grant.
pub const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(50);

// Defaults of a lock (see `LockOptions`).

/// Default mean delay between two attempts of [`crate::Redlock::lock`].
///
/// Randomised between half and one and a half times this value so that
/// clients that collided do not collide again in lock step.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);

/// Shortest retry delay accepted.
///
/// A waiter polls at this pace between wake-ups; at zero it would retry in
/// a hot loop, sending every node a request per scheduler turn while the
/// resource is held.
pub const MIN_RETRY_DELAY: Duration = Duration::from_millis(1);

/// Default time [`crate::Redlock::lock`] keeps trying before it gives up.
///
/// Enough to ride out a short critical section of another holder and a node
/// restart; short enough that a stuck holder surfaces as an error.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// Default minimum validity an acquisition must leave (any positive time).
pub const DEFAULT_MIN_VALIDITY: Duration = Duration::ZERO;

/// Validity a lock must still have, beyond one renewal round, for guarded
/// work to start under it ([`crate::Guard::start_deadline`]).
///
/// Work is started by [`crate::Redlock::with_lock`] (its first poll), the
/// blocking client's `with_lock` (the closure's call) and `quorumlock run`
/// (the command's exec). Between taking the lock and that start, the
/// process can stall: a runtime thread busy with other work, a blocked log
/// write, a SIGSTOP. Work that starts after the validity ended would run
/// beside the next holder, and the loss signal cannot stop a step that is
/// already running. So work starts only while more validity is left than the
/// first renewal needs to be confirmed (the node timeout bounds its round)
/// plus this allowance for the start itself: an exec of a command takes a
/// millisecond or two, a first poll far less; ten milliseconds cover them
/// on a loaded machine.
pub const START_MARGIN: Duration = Duration::from_millis(10);

// Fencing, idempotency keys and shutdown.

/// Proposal rounds of a fenced acquisition before it gives up.
///
/// A round is rejected by a majority only when another proposal for the same
/// resource raced ours (the lock excludes that unless it was violated) or
/// the fenced acquire's replies came from a stale minority; each retry proposes above every fence it was
/// told about, so one retry normally suffices. Four bound the extra round
/// trips when something is badly wrong.
pub(crate) const FENCE_ROUNDS: u32 = 4;

/// How long a lock node keeps a resource's fence after the last token it
/// accepted (the fence key's expiry, set again with every token).
///
/// A fence key forever would leave one key per fenced resource ever locked,
/// and a node under `noeviction` runs out of memory. Forgetting it is safe
/// for the same reason a restart without persistence is (the module docs):
/// a node that lost the fence offers its clock, `TIME` in µs, instead, and a
/// day after the last token that clock is a day of µs above it. Tokens only
/// run ahead of the clocks by the number of tokens issued faster than one
/// per µs, so the new value is larger as long as the nodes' clocks neither
/// differ nor step back by anything near a day. The argument in full is in
/// docs/how-it-works.md ("Fencing tokens", "Retention").
pub(crate) const FENCE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How far ahead of the nodes' clocks, as last seen, a fenced acquire
/// proposes its token.
///
/// A node takes the token proposed with its grant only if it is above its
/// fence floor, which its clock (`TIME` in µs) bounds from below: the
/// proposal must reach the node before the node's clock passes it. The
/// estimate of the clocks already runs ahead of them by the round trip it
/// was read in; this covers the one-way trip of the next request and the
/// jitter of a LAN. A node reached later than that refuses the proposal,
/// which costs the acquisition one more round trip (the proposal phase),
/// never safety.
pub(crate) const FENCE_LEAD: Duration = Duration::from_millis(1);

/// How far ahead of its clock a node takes a proposed token at most.
///
/// A node restarted without persistence forgets its fences and offers its
/// clock instead, which is above every old token only if tokens never ran
/// ahead of the clocks by more than the node was down (at least the longest
/// ttl in use, the rule for restarts without persistence, and a ttl is
/// longer than the node timeout). Ten milliseconds leave room for
/// [`FENCE_LEAD`], a round trip and the nodes' clocks differing by a few
/// milliseconds; a proposal further ahead (a client whose clock jumped) is
/// refused and the acquisition falls back to the proposal phase.
pub(crate) const FENCE_AHEAD: Duration = Duration::from_millis(10);

// A proposal made with the lead must be one the nodes take.
const _: () = assert!(FENCE_LEAD.as_micros() < FENCE_AHEAD.as_micros());

/// Default time a stored result (or cached failure) is kept: 24 hours.
///
/// Clients retry a request for minutes to hours (mobile apps resending after
/// a reconnect, queues redelivering the next day's batch); a day covers that
/// while bounding the memory stored results take in Redis.
pub const DEFAULT_RESULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Default bound of a shutdown that nobody gave a timeout: the CLI's, and
/// the blocking client's when it is dropped.
///
/// A release at shutdown may first have to connect (the connect timeout,
/// [`crate::DEFAULT_CONNECT_TIMEOUT`], 1 s) and then wait for the reply (the
/// node timeout, [`crate::DEFAULT_NODE_TIMEOUT`], 100 ms); two seconds cover
/// both with room for a loaded machine, and are short enough for a program
/// on its way out.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

// Renewal, hand-off and connections: rules the library keeps itself.

/// A lock is renewed every `ttl / RENEW_DIVISOR`.
///
/// Renewing at a third of the ttl leaves two more thirds of validity for
/// retries when a round fails, before the lock would run out (the rule
/// Redisson's watchdog uses).
pub(crate) const RENEW_DIVISOR: u32 = 3;

/// How much longer than its waiter a queue entry lives: covers the clock
/// difference between the waiting client, which sets an entry's deadline,
/// and the releasing client, which drops entries past it. An entry that outlives its waiter
/// costs at most one hand-off that falls back to polling.
pub(crate) const QUEUE_MARGIN: Duration = Duration::from_secs(1);

/// How long the watchdog task stays when no lock is left to renew, before it
/// ends. A client that takes its next lock soon (a worker's next job, a
/// lock taken and released in a loop) would otherwise start and end a task
/// for every lock; a task that sleeps costs a timer and nothing else. One
/// second keeps a client that is done with its locks from holding its
/// watchdog (and through it the node connections) for long.
pub(crate) const WATCHDOG_LINGER: Duration = Duration::from_secs(1);

/// How long a client stays subscribed after its last waiter left. A client
/// that waits again soon (a worker taking its next job, a holder queueing
/// again right after its release) would otherwise send `UNSUBSCRIBE` and
/// `SUBSCRIBE` to every node, and its first waiter would wait for the
/// nodes' confirmation before its first queued attempt: under contention
/// that churn would be a large share of the requests per hand-off. One
/// second is far longer than a hand-off and short enough that nothing
/// stays subscribed for long once no one waits.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// First pause before reconnecting a pub/sub connection that failed or was
/// dropped: short, because a dropped connection to a live node (a restart, a
/// proxy cutting idle flows) is the usual case, and waiters miss its
/// notifications until it is back.
pub(crate) const RESUBSCRIBE_BASE: Duration = Duration::from_millis(100);

/// Longest pause between reconnection attempts. While a node stays down,
/// the pause doubles from [`RESUBSCRIBE_BASE`] up to this: every client that
/// ever waited keeps a subscriber per node for its whole life, and at a
/// fixed 100 ms pace a fleet of them would hammer a node that is down or
/// restarting with connection attempts (each a TCP handshake and a failed
/// client setup). Waiters keep polling meanwhile, so a node back up is
/// missed by notifications for at most this long.
pub(crate) const RESUBSCRIBE_CAP: Duration = Duration::from_secs(5);

/// How often an idle pub/sub connection is checked with a PING. A connection
/// can die without the client noticing (a half-open socket, a black-holed
/// network path); the check bounds how long waiters miss notifications from
/// that node (they keep polling meanwhile).
pub(crate) const PUBSUB_PING: Duration = Duration::from_secs(1);

/// Idle time after which the kernel starts probing a node connection
/// (TCP keepalive).
///
/// Firewalls and NATs drop the state of flows that stay idle (commonly
/// after one to several minutes), after which the connection is half-open:
/// it looks fine, but nothing sent on it arrives. Probing every ten seconds
/// of silence keeps that state alive, and a peer that is gone (a host that
/// died without closing) is found by the kernel before the next request
/// has to find it (see [`STALL_FLOOR`]).
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// Time between unanswered keepalive probes.
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// Unanswered keepalive probes after which the kernel drops the connection:
/// with [`KEEPALIVE_IDLE`] and [`KEEPALIVE_INTERVAL`], an idle connection
/// to a vanished peer is gone within 25 s, while a few lost probes (a
/// congested link) do not cut a working one.
pub(crate) const KEEPALIVE_RETRIES: u32 = 3;

/// The shortest stall limit of a node connection (the time it may leave
/// requests unanswered before the node checks it still works).
///
/// A reply can be late without anything being broken: a fork for a
/// snapshot, another client's slow command, a slow link. Every stall costs
/// a probe connection; below a quarter second those ordinary delays would
/// look like stalls.
pub(crate) const STALL_FLOOR: Duration = Duration::from_millis(250);

/// Readings of a node's clock kept to estimate its rate (see
/// `node::clock`). Readings come every 200 ms ([`RATE_READ_EVERY`]) or
/// every renewal period; sixteen span seconds, a baseline long enough for
/// round trips of several milliseconds on a loaded machine, and bound the
/// work of an estimate (one pass over them per reading).
pub(crate) const RATE_SAMPLES: usize = 16;

/// How far back a node's clock readings count, from the newest one. A rate
/// measured over the last minute follows a clock that changed its speed;
/// readings older than that describe a clock that may have been corrected
/// since (an NTP slew, a VM migrated to another host).
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(60);

/// The loosest error bound (relative) a pair of clock readings may have to
/// count. Round trips that were slow next to the time between the readings
/// say little about the rate; at 0.2 % the noise of a measurement stays
/// well inside the 1 % drift allowance ([`DEFAULT_DRIFT_FACTOR`]), so a
/// node with a correct clock never looks fast. Readings 333 ms apart (the
/// renewals of a 1 s lock) qualify with round trips up to about 0.6 ms.
pub(crate) const RATE_MAX_ERROR: f64 = 0.002;

/// How often a client that takes locks reads each node's clock (`TIME`,
/// in the background, off the acquisition's path) when no renewal round
/// did so meanwhile. Readings 200 ms apart bound a rate to the 0.2 % of
/// [`RATE_MAX_ERROR`] with round trips up to 0.4 ms, so a client knows a
/// node's rate about half a second after it starts taking locks, and sees
/// a clock change within 200 ms; five `TIME` calls a second per node and
/// busy client cost the node next to nothing.
pub(crate) const RATE_READ_EVERY: Duration = Duration::from_millis(200);

/// The least time between two refreshes of a Redis Cluster member's slot
/// map (`CLUSTER SLOTS`). While a primary fails over, every request to its
/// slots fails and marks the map stale; one refresh per 100 ms bounds that
/// to ten small commands a second per client, and still follows a promoted
/// replica within a tenth of a second of the cluster announcing it (the
/// failover itself takes the cluster's node timeout, seconds). A `MOVED`
/// refusal corrects its slot at once, without waiting for a refresh.
pub(crate) const SLOT_MAP_REFRESH_EVERY: Duration = Duration::from_millis(100);

/// What "never" is for a wait or timeout of `Duration::MAX`: a century, far beyond any
/// process's life, and small enough for every clock's `Instant`.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The etcd backend's timing rules.
#[cfg(feature = "etcd")]
pub(crate) mod etcd {
    use std::time::Duration;

    /// The least time an etcd request may take before it counts as failed
    /// (the builder's node timeout, when larger, applies instead).
    ///
    /// A write to etcd is acknowledged once a majority of members has synced it
    /// to disk, and during a leader election nothing is acknowledged until a
    /// leader is elected (etcd's election timeout is 1 s by default). The Redis
    /// node timeout (100 ms) would turn a slow fsync into an outage; half a
    /// second rides out the fsync and a fast election, and the ttl check keeps
    /// every lock's validity above it.
    pub(crate) const ETCD_MIN_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

    /// How often the connection to each etcd member is checked with an HTTP/2
    /// ping.
    ///
    /// A member that is paused or cut off keeps its TCP connection open and
    /// says nothing; the client would go on sending it its share of requests,
    /// each lost for a whole request timeout. An unanswered ping (within the
    /// request timeout) takes the member out of the balancer until it answers
    /// again. Four pings a second per member cost nothing next to the lock
    /// traffic and bound that detection to under a second.
    pub(crate) const ETCD_PING_EVERY: Duration = Duration::from_millis(250);

    /// How soon an etcd keep-alive that failed is sent again.
    ///
    /// A failed keep-alive is nearly always a leader election or a member
    /// restart, over within an election timeout; trying every 100 ms confirms
    /// the lease as soon as a leader serves again, without flooding a cluster
    /// that is electing, and leaves many tries within a lease of a second or more.
    pub(crate) const ETCD_RENEW_RETRY: Duration = Duration::from_millis(100);
}

/// The ZooKeeper backend's timing rules.
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper {
    use std::time::Duration;

    /// The session timeout a `zk://` URL asks for when it names none
    /// (`?session_timeout=`): kazoo's default, so that a Python service and a
    /// Rust one on the same ensemble lose a dead holder's lock equally fast.
    /// The ensemble bounds it (by default to 2 to 20 ticks of its `tickTime`).
    pub(crate) const ZK_DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

    /// The least time a ZooKeeper request may take before it counts as failed
    /// (the builder's node timeout, when larger, applies instead).
    ///
    /// A write is acknowledged once a majority of the ensemble has logged it to
    /// disk, and while the ensemble elects a leader nothing is answered; half a
    /// second rides out a slow fsync and a fast election, as for etcd.
    pub(crate) const ZK_MIN_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

    /// The share of the negotiated session timeout that an answered heartbeat
    /// vouches for, counted from the instant it was sent.
    ///
    /// The ensemble's leader expires a session a session timeout after it last
    /// heard of it, and it hears of a client connected to a follower only
    /// through that follower's reply to its next ping (every half tick; a
    /// session timeout is at least two ticks, so that is at most a quarter of
    /// the timeout). A follower cut off from the leader right after it answered
    /// may never pass the last heartbeat on, but it did pass on the one before,
    /// sent at most a third of the timeout earlier (renewal comes at half the
    /// validity at the latest), so the session lives at least two thirds of
    /// the timeout past the last one's sending. Two thirds is also ZooKeeper's
    /// own client rule for declaring a connection dead.
    pub(crate) const ZK_TRUSTED_SHARE: f64 = 2.0 / 3.0;

    /// How soon a ZooKeeper heartbeat or release that failed is tried again.
    ///
    /// A failed request is nearly always a connection moving to another server
    /// or an election, over within a second or two; every 100 ms confirms the
    /// session as soon as the ensemble serves again without flooding it.
    pub(crate) const ZK_RETRY: Duration = Duration::from_millis(100);

    /// How often a waiter looks at its predecessor's node again while it also
    /// waits for the watch on it: a watch set on a server that is paused or cut
    /// off may never fire, and the client moves to another server only after a
    /// ping goes unanswered. Looking again every half second bounds what a lost
    /// watch costs a waiter.
    pub(crate) const ZK_WAITER_RECHECK: Duration = Duration::from_millis(500);
}

/// The builder's settings that apply to a store that counts as one member
/// (an etcd cluster, a ZooKeeper ensemble).
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
pub(crate) struct Timing {
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) drift_fixed: Duration,
}
