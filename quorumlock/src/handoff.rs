//! Fast hand-off: waiters are woken by release notifications instead of
//! polling alone.
//!
//! Waiters queue on the nodes, per resource, in the order they started
//! waiting (see `scripts::REGISTER`). A release that deletes a key pops the
//! head of its queue and publishes a wake-up for that one waiter
//! (`scripts::announce_lua!`), on the channel of the waiter's client:
//! `quorumlock:wake:<client id>`, the id being part of the queue entry. So
//! only the named waiter retries at once, wherever it runs, waiters are
//! served first come, first served, and a release costs each node one
//! message, however many processes wait. (A channel per resource, heard by
//! every waiting process, was the first design: with 16 waiting processes a
//! node sent 16 messages per release and every client parsed them all.)
//!
//! A client keeps at most one pub/sub connection per node (opened on the
//! first wait, kept while the client lives, re-established and resubscribed
//! after the node drops it) and subscribes its one channel there while it
//! has waiters, reference-counted: nothing per waiter or per resource, and
//! nothing subscribed once no one has waited for a second (see [`LINGER`]).
//! The same release heard from several nodes is folded into one wake-up. A
//! named waiter that loses the race (to a caller that did not queue) takes
//! its old place again.
//!
//! Polling with a capped, jittered backoff stays underneath, for releases by
//! other libraries (no message), expiry of a crashed holder's key, lost
//! messages, and a queue head that is gone (a waiter that died without
//! leaving the queue is skipped by the next release, or expires with its
//! deadline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::keys;
use crate::node::Node;
use crate::quorum;
use crate::scripts;
use crate::tasks::{Tasks, Work};

/// First pause before reconnecting a pub/sub connection that failed or was
/// dropped: short, because a dropped connection to a live node (a restart, a
/// proxy cutting idle flows) is the usual case, and waiters miss its
/// notifications until it is back.
const RESUBSCRIBE_BASE: Duration = Duration::from_millis(100);

/// Longest pause between reconnection attempts. While a node stays down,
/// the pause doubles from [`RESUBSCRIBE_BASE`] up to this: every client that
/// ever waited keeps a subscriber per node for its whole life, and at a
/// fixed 100 ms pace a fleet of them would hammer a node that is down or
/// restarting with connection attempts (each a TCP handshake and a failed
/// client setup). Waiters keep polling meanwhile, so a node back up is
/// missed by notifications for at most this long.
const RESUBSCRIBE_CAP: Duration = Duration::from_secs(5);

/// How often an idle pub/sub connection is checked with a PING. A connection
/// can die without the client noticing (a half-open socket, a black-holed
/// network path); the check bounds how long waiters miss notifications from
/// that node (they keep polling meanwhile).
const PUBSUB_PING: Duration = Duration::from_secs(1);

/// How long a client stays subscribed after its last waiter left. A client
/// that waits again soon (a worker taking its next job, a holder queueing
/// again right after its release) would otherwise send `UNSUBSCRIBE` and
/// `SUBSCRIBE` to every node, and its first waiter would wait for the
/// nodes' confirmation before its first queued attempt. With 16 clients
/// taking turns that churn was 6 of the 21 requests per hand-off. One
/// second is far longer than a hand-off and short enough that nothing
/// stays subscribed for long once no one waits.
const LINGER: Duration = Duration::from_secs(1);

/// How much longer than its waiter a queue entry lives: covers the clock
/// difference between the waiting client, which sets an entry's deadline,
/// and the releasing client, which drops entries past it. An entry that outlives its waiter
/// costs at most one hand-off that falls back to polling.
const QUEUE_MARGIN: Duration = Duration::from_secs(1);

/// The client's clock in unix milliseconds, which queue deadlines are set
/// and checked by (see [`QUEUE_MARGIN`]).
pub(crate) fn unix_ms() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

/// The pub/sub channel of the client with `id`: the releases that name one
/// of its waiters publish there.
fn channel(id: &str) -> String {
    format!("{WAKE_PREFIX}{id}")
}

/// The prefix of every client's channel.
const WAKE_PREFIX: &str = "quorumlock:wake:";

/// A waiter's queue entry as an attempt sends it (see [`Subscription::entry`]).
#[derive(Clone, Debug)]
pub(crate) struct QueueEntry {
    /// The queue keys, one per resource.
    pub(crate) queues: Arc<[String]>,
    /// When the waiter started waiting (unix µs): its place in line.
    pub(crate) place: u64,
    pub(crate) member: Arc<str>,
    /// The queue's ttl: the waiter's remaining wait plus the margin.
    pub(crate) ttl_ms: u128,
}

/// Takes the waiter of `entry` off its queues on the nodes that `refused`
/// an attempt that carried the entry and still took the lock (a majority
/// granted): a refusing node kept the waiter in line, typically because the
/// previous holder's release had not reached it yet. The nodes that granted
/// left the queue in the same call (`scripts::ACQUIRE_OR_QUEUE`). A node
/// whose refusal comes after the lock was taken is sent the removal by that
/// request itself (see [`Refusals`]). Not awaited (see `quorum::send_all`);
/// each removal runs after the attempt on its node's connection.
pub(crate) async fn leave(
    nodes: &Arc<[Node]>,
    tasks: &Arc<Tasks>,
    entry: &QueueEntry,
    refused: &[usize],
    finish_by: Instant,
) {
    unregister(nodes, tasks, &entry.queues, &entry.member, refused, finish_by).await;
}

/// The nodes that refused one queueing attempt (and so still list its
/// waiter), and whether the attempt took the lock.
///
/// A refusal can come after the majority that took the lock, from a node
/// the attempt stopped waiting for. Its entry must be removed as well: the
/// late release that made the node refuse pops only the head of its queue,
/// and when that node lags by more than one hand-off, the head is an
/// earlier waiter, so the entry would stay (and be named by a later release
/// in place of a live waiter) until its deadline. Seen as a waiter entry
/// left behind by six waiters taking turns, 2026-12-03. Each request
/// reports its refusal here: before the lock is taken it is collected for
/// [`leave`]; after, the request removes the entry itself. Costs nothing
/// when every node grants, and one command per late refusal.
#[derive(Debug)]
pub(crate) struct Refusals(Mutex<Option<Vec<usize>>>);

impl Default for Refusals {
    fn default() -> Self {
        // Undecided, no refusal yet; `None` once the lock was taken.
        Refusals(Mutex::new(Some(Vec::new())))
    }
}

impl Refusals {
    fn state(&self) -> MutexGuard<'_, Option<Vec<usize>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `node` refused the attempt (and queued the waiter). True when the
    /// lock was already taken: the caller then removes the entry there.
    pub(crate) fn refused(&self, node: usize) -> bool {
        match &mut *self.state() {
            Some(refused) => {
                refused.push(node);
                false
            }
            None => true,
        }
    }

    /// The attempt took the lock: the nodes that refused so far, for
    /// [`leave`]. Later refusals are left by their own requests.
    pub(crate) fn taken(&self) -> Vec<usize> {
        self.state().take().unwrap_or_default()
    }
}

/// Sends `scripts::UNREGISTER` of `member` from `queues` to the nodes
/// `which`, without awaiting the replies (see `quorum::send_all`).
async fn unregister(
    nodes: &Arc<[Node]>,
    tasks: &Arc<Tasks>,
    queues: &Arc<[String]>,
    member: &Arc<str>,
    which: &[usize],
    finish_by: Instant,
) {
    quorum::send_all(which.len(), tasks, finish_by, |j| {
        let (nodes, queues, member, node) = (
            Arc::clone(nodes),
            Arc::clone(queues),
            Arc::clone(member),
            which[j],
        );
        async move {
            let mut cmd = scripts::UNREGISTER.eval(&queues);
            cmd.arg(&*member);
            nodes[node].send::<redis::Value>(cmd).await
        }
    })
    .await;
}

/// Per-client hand-off state, shared by all waiters.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    shared: Arc<Shared>,
    /// Command senders to each node's subscriber task, started on first use.
    tasks: Mutex<Vec<Option<mpsc::UnboundedSender<Command>>>>,
}

#[derive(Debug)]
struct Shared {
    /// This client's id (random, 64 bits), as queue members carry it and
    /// its channel is named (see [`channel`]).
    id: String,
    waiters: Mutex<Waiters>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            id: format!("{:016x}", rand::random::<u64>()),
            waiters: Mutex::default(),
        }
    }
}

/// This client's waiters, by queue member.
#[derive(Debug, Default)]
struct Waiters {
    by_member: HashMap<Arc<str>, Waiter>,
}

#[derive(Debug)]
struct Waiter {
    wake: Arc<Notify>,
    /// The token of the last release that named this waiter, to fold the
    /// messages of one release from several nodes into one wake-up.
    last: Vec<u8>,
    /// Its queue keys, for a shutdown that takes it off them.
    queues: Arc<[String]>,
}

#[derive(Debug)]
enum Command {
    /// Subscribe the client's channel; answer once the node confirmed.
    Subscribe(oneshot::Sender<()>),
    Unsubscribe,
}

impl Shared {
    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A release message: `<token> <member>` (see `scripts::announce_lua!`).
    /// Wakes that waiter, unless the same release already did (from another
    /// node) or the waiter is gone.
    fn deliver(&self, channel: &str, message: &[u8]) {
        if channel.strip_prefix(WAKE_PREFIX) != Some(self.id.as_str()) {
            return;
        }
        let Some(at) = message.iter().position(|&b| b == b' ') else {
            return;
        };
        let (token, member) = (&message[..at], &message[at + 1..]);
        let Ok(member) = std::str::from_utf8(member) else {
            return;
        };
        let mut waiters = self.waiters();
        if let Some(waiter) = waiters.by_member.get_mut(member)
            && waiter.last != token
        {
            waiter.last = token.to_vec();
            waiter.wake.notify_one();
        }
    }
}

/// A waiter's share of its client's subscription and its place in the
/// queues of its resources; ends (unsubscribing when it was the client's
/// last waiter, and leaving the queues) on drop.
#[derive(Debug)]
pub(crate) struct Subscription {
    handoff: Weak<Shared>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    nodes: Arc<[Node]>,
    tasks: Arc<Tasks>,
    /// This waiter's queue keys, place and member.
    queues: Arc<[String]>,
    place: u64,
    member: Arc<str>,
    /// Until when the queue entry is kept (the waiter's deadline plus
    /// [`QUEUE_MARGIN`]).
    until: Instant,
    /// Woken by releases that name this waiter.
    mine: Arc<Notify>,
    /// Registered on the nodes and not known to be off every queue.
    queued: bool,
}

impl Subscription {
    /// Completes on a release of any of the resources that names this
    /// waiter (which took it off that node's queue).
    pub(crate) async fn released(&self) {
        self.mine.notified().await;
    }

    /// This waiter's queue entry, for an attempt that queues it where the
    /// resource is held (`scripts::ACQUIRE_OR_QUEUE`); `None` once its
    /// deadline has passed.
    pub(crate) fn entry(&mut self) -> Option<QueueEntry> {
        let left = self.until.checked_duration_since(Instant::now())?;
        self.queued = true;
        Some(QueueEntry {
            queues: Arc::clone(&self.queues),
            place: self.place,
            member: Arc::clone(&self.member),
            ttl_ms: left.as_millis().max(1),
        })
    }

    /// Joins the resources' queues on every node, or takes the old place
    /// again after a named wake-up lost the race. Does not wait for the
    /// nodes' replies: the registration is handed to each node's connection
    /// before this returns, so it runs before this waiter's next attempt.
    pub(crate) async fn register(&mut self) {
        let now = Instant::now();
        if now >= self.until {
            return;
        }
        let ttl_ms = (self.until - now).as_millis().max(1).to_string();
        let (nodes, queues, member, place) = (
            Arc::clone(&self.nodes),
            Arc::clone(&self.queues),
            Arc::clone(&self.member),
            self.place.to_string(),
        );
        quorum::send_all(self.nodes.len(), &self.tasks, self.until, |i| {
            let (nodes, queues, member, place, ttl_ms) = (
                Arc::clone(&nodes),
                Arc::clone(&queues),
                Arc::clone(&member),
                place.clone(),
                ttl_ms.clone(),
            );
            async move {
                let mut cmd = scripts::REGISTER.eval(&queues);
                cmd.arg(place).arg(&*member).arg(ttl_ms);
                nodes[i].send::<redis::Value>(cmd).await
            }
        })
        .await;
        self.queued = true;
    }

    /// The lock was taken after a release named this waiter: the releases
    /// that named it took it off those queues, so there is nothing to leave.
    pub(crate) fn served(&mut self) {
        self.queued = false;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.queued {
            let (nodes, tasks, queues, member, until) = (
                Arc::clone(&self.nodes),
                Arc::clone(&self.tasks),
                Arc::clone(&self.queues),
                Arc::clone(&self.member),
                self.until,
            );
            self.tasks.spawn_if_running(Work::Queue, async move {
                let all: Vec<usize> = (0..nodes.len()).collect();
                unregister(&nodes, &tasks, &queues, &member, &all, until).await;
            });
        }
        let Some(shared) = self.handoff.upgrade() else {
            return;
        };
        let mut waiters = shared.waiters();
        if waiters.by_member.remove(&self.member).is_some() && waiters.by_member.is_empty() {
            // Under the lock, so that a new first waiter's Subscribe is
            // queued after this.
            for sender in &self.senders {
                let _ = sender.send(Command::Unsubscribe);
            }
        }
    }
}

impl Handoff {
    /// Makes a waiter for `resources`: subscribes the client's channel on
    /// every node if this is its first waiter, and then waits (up to
    /// `timeout`) until the nodes confirmed, so that a release after this
    /// returns is not missed. The waiter is not queued yet (see
    /// [`Subscription::register`]); its queue entries last until
    /// `wait_until` plus a margin.
    pub(crate) async fn subscribe(
        &self,
        nodes: &Arc<[Node]>,
        tasks: &Arc<Tasks>,
        resources: &[String],
        timeout: Duration,
        wait_until: Instant,
    ) -> Subscription {
        let senders = self.senders(nodes, tasks);
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let until = wait_until + QUEUE_MARGIN;
        let deadline_ms = (since_epoch + until.saturating_duration_since(Instant::now())).as_millis();
        let member: Arc<str> =
            format!("{deadline_ms}:{}:{:016x}", self.shared.id, rand::random::<u64>()).into();
        let mine = Arc::new(Notify::new());
        let queues: Arc<[String]> = resources.iter().map(|r| keys::queue(r)).collect();
        let mut confirmations = Vec::new();
        {
            let mut waiters = self.shared.waiters();
            let first = waiters.by_member.is_empty();
            let waiter = Waiter {
                wake: Arc::clone(&mine),
                last: Vec::new(),
                queues: Arc::clone(&queues),
            };
            waiters.by_member.insert(Arc::clone(&member), waiter);
            if first {
                for sender in &senders {
                    let (done, confirmed) = oneshot::channel();
                    if sender.send(Command::Subscribe(done)).is_ok() {
                        confirmations.push(confirmed);
                    }
                }
            }
        }
        // A node that cannot confirm in time is covered by polling.
        let _ = tokio::time::timeout(timeout, futures::future::join_all(confirmations)).await;
        Subscription {
            handoff: Arc::downgrade(&self.shared),
            senders,
            nodes: Arc::clone(nodes),
            tasks: Arc::clone(tasks),
            queues,
            place: u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX),
            member,
            until,
            mine,
            queued: false,
        }
    }

    /// Takes every waiter of this client off its queues on every node (at
    /// shutdown: a waiter's own task may not run again before its program
    /// exits, and an entry left behind would be named by releases in place
    /// of live waiters until its deadline). Not awaited, as
    /// `quorum::send_all`: a shutdown waits for its tracked work.
    pub(crate) async fn leave_all(&self, nodes: &Arc<[Node]>, tasks: &Arc<Tasks>, finish_by: Instant) {
        let queued: Vec<(Arc<str>, Arc<[String]>)> = self
            .shared
            .waiters()
            .by_member
            .iter()
            .map(|(member, waiter)| (Arc::clone(member), Arc::clone(&waiter.queues)))
            .collect();
        let all: Vec<usize> = (0..nodes.len()).collect();
        for (member, queues) in queued {
            unregister(nodes, tasks, &queues, &member, &all, finish_by).await;
        }
    }

    /// The command senders of every node's subscriber task, starting those
    /// that are not running (also those whose runtime shut down: their
    /// receiver was dropped with them, which closes the sender).
    fn senders(&self, nodes: &Arc<[Node]>, tasks: &Arc<Tasks>) -> Vec<mpsc::UnboundedSender<Command>> {
        let mut running = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        running.resize_with(nodes.len(), || None);
        (0..nodes.len())
            .map(|i| {
                if let Some(sender) = running[i].as_ref().filter(|s| !s.is_closed()) {
                    return sender.clone();
                }
                let (sender, commands) = mpsc::unbounded_channel();
                let subscriber = subscriber(
                    Arc::clone(nodes),
                    i,
                    Arc::downgrade(&self.shared),
                    channel(&self.shared.id),
                    commands,
                );
                let closing = tasks.closing().clone();
                tasks.spawn(Work::Subscription, async move {
                    // A shutdown ends it, connected or not.
                    tokio::select! {
                        () = subscriber => {}
                        () = closing.cancelled() => {}
                    }
                });
                running[i] = Some(sender.clone());
                sender
            })
            .collect()
    }
}

/// Capped exponential backoff with jitter between one subscriber's
/// reconnection attempts (see [`RESUBSCRIBE_CAP`]).
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            next: RESUBSCRIBE_BASE,
        }
    }

    /// The pause before the next attempt: a random time between half the
    /// current step and the step, which then doubles up to the cap. Random,
    /// so that the subscribers of many clients, cut off together, do not
    /// come back in lockstep; never below half the step, so that the pace
    /// stays bounded.
    fn pause(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(RESUBSCRIBE_CAP);
        step / 2 + step.mul_f64(rand::random::<f64>() / 2.0)
    }

    /// The node answered on a new connection: the next failure is retried
    /// soon again.
    fn reset(&mut self) {
        self.next = RESUBSCRIBE_BASE;
    }
}

/// Completes at `at`, or never for `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One node's pub/sub connection: applies subscribe commands, delivers
/// messages, and reconnects and resubscribes when the connection drops. Ends
/// when the client is gone.
async fn subscriber(
    nodes: Arc<[Node]>,
    index: usize,
    shared: Weak<Shared>,
    channel: String,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let node = &nodes[index];
    let mut backoff = Backoff::new();
    loop {
        let connected = tokio::time::timeout(node.connect_timeout(), node.client().get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            tokio::time::sleep(backoff.pause()).await;
            // Confirm nothing while down: waiters fall back to polling.
            while let Ok(command) = commands.try_recv() {
                drop(command);
            }
            if shared.strong_count() == 0 {
                return;
            }
            continue;
        };
        let (mut sink, mut stream) = pubsub.split();
        let waiting = match shared.upgrade() {
            Some(shared) => !shared.waiters().by_member.is_empty(),
            None => return,
        };
        // Whether the channel is subscribed on this connection, and until
        // when it stays so with no waiter (see [`LINGER`]).
        let mut subscribed = waiting;
        let mut linger_until: Option<Instant> = None;
        // The connection counts as working once the node answered on it
        // (the subscription's confirmation, or a PING): a node that accepts
        // connections and then drops or ignores them is backed off like one
        // that refuses them.
        let answered = if waiting {
            tokio::time::timeout(node.connect_timeout(), sink.subscribe(&channel)).await
        } else {
            tokio::time::timeout(node.connect_timeout(), sink.ping::<redis::Value>())
                .await
                .map(|pong| pong.map(drop))
        };
        if !matches!(answered, Ok(Ok(()))) {
            // E.g. no channel permission: retry at the reconnect pace.
            tokio::time::sleep(backoff.pause()).await;
            continue;
        }
        backoff.reset();
        let mut health = tokio::time::interval(PUBSUB_PING);
        health.tick().await;
        loop {
            tokio::select! {
                _ = health.tick() => {
                    let ping = tokio::time::timeout(node.connect_timeout(), sink.ping::<redis::Value>()).await;
                    if !matches!(ping, Ok(Ok(_))) {
                        break;
                    }
                }
                () = sleep_until_some(linger_until) => {
                    linger_until = None;
                    let idle = shared.upgrade().is_none_or(|shared| shared.waiters().by_member.is_empty());
                    // A waiter that joined meanwhile keeps the subscription
                    // (its Subscribe, still queued, is confirmed at once).
                    if idle {
                        subscribed = false;
                        if sink.unsubscribe(&channel).await.is_err() {
                            break;
                        }
                    }
                }
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(done)) => {
                        linger_until = None;
                        if !subscribed {
                            if sink.subscribe(&channel).await.is_err() {
                                break;
                            }
                            subscribed = true;
                        }
                        let _ = done.send(());
                    }
                    Some(Command::Unsubscribe) => {
                        if subscribed {
                            linger_until = Some(Instant::now() + LINGER);
                        }
                    }
                },
                message = stream.next() => match (message, shared.upgrade()) {
                    (Some(message), Some(shared)) => {
                        shared.deliver(message.get_channel_name(), message.get_payload_bytes());
                    }
                    (None, _) => break,
                    (_, None) => return,
                },
            }
        }
        tracing::debug!(node = node.name(), "pub/sub connection lost, resubscribing");
        tokio::time::sleep(backoff.pause()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each pause lies in the upper half of its step, the steps double up to
    /// the cap, and a reset starts over.
    #[test]
    fn reconnection_pauses_double_up_to_the_cap_and_reset() {
        let mut backoff = Backoff::new();
        let mut step = RESUBSCRIBE_BASE;
        for _ in 0..12 {
            let pause = backoff.pause();
            assert!(
                pause >= step / 2 && pause <= step,
                "{pause:?} for a step of {step:?}"
            );
            step = (step * 2).min(RESUBSCRIBE_CAP);
        }
        assert_eq!(step, RESUBSCRIBE_CAP, "capped");
        backoff.reset();
        assert!(backoff.pause() <= RESUBSCRIBE_BASE, "back to the first step");
    }
}
