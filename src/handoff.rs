//! Fast hand-off: waiters are woken by release notifications instead of
//! polling alone.
//!
//! The release script publishes on `quorumlock:released:<resource>` on every
//! node where it deleted the key and someone is queued (below). A client keeps at most one pub/sub
//! connection per node (opened on the first wait, kept while the client
//! lives, re-established and resubscribed after the node drops it), shared by
//! all its waiters, with reference-counted channel subscriptions: nothing per
//! waiter, and a channel is unsubscribed as soon as its last waiter is gone.
//!
//! Every subscriber hears every release, so waking every waiting process
//! would make them all retry at once and all but one lose (a herd: with 16
//! waiting processes, 15 failed attempts per hand-off). So waiters also
//! queue on the nodes, per resource, in the order they started waiting (see
//! `scripts::REGISTER`), and the release names the head of the queue in its
//! message (`scripts::announce_lua!`): only that waiter retries at once,
//! wherever it runs, and waiters are served first come, first served. The
//! same release heard from several nodes is folded into one wake-up. A
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

use crate::node::Node;
use crate::quorum;
use crate::scripts;

/// Pause before reconnecting a dropped pub/sub connection; a node that is
/// down is retried at this pace (waiters keep polling meanwhile).
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(100);

/// How often an idle pub/sub connection is checked with a PING. A connection
/// can die without the client noticing (a half-open socket, a black-holed
/// network path); the check bounds how long waiters miss notifications from
/// that node (they keep polling meanwhile).
const PUBSUB_PING: Duration = Duration::from_secs(1);

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

/// The pub/sub channel announcing releases of `resource`.
pub(crate) fn channel(resource: &str) -> String {
    format!("quorumlock:released:{resource}")
}

/// The queue of waiters for `resource` (a sorted set on each node).
pub(crate) fn queue(resource: &str) -> String {
    format!("quorumlock:waiters:{resource}")
}

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

/// Per-client hand-off state, shared by all waiters.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    shared: Arc<Shared>,
    /// Command senders to each node's subscriber task, started on first use.
    tasks: Mutex<Vec<Option<mpsc::UnboundedSender<Command>>>>,
}

#[derive(Debug, Default)]
struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
}

#[derive(Debug)]
struct Channel {
    waiters: usize,
    /// This client's waiters on the channel, by queue member.
    named: HashMap<String, Arc<Notify>>,
    /// The last message seen, to fold one release's messages from several
    /// nodes into one wake-up.
    last: Vec<u8>,
}

#[derive(Debug)]
enum Command {
    Subscribe(String, oneshot::Sender<()>),
    Unsubscribe(String),
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A release message: `<token> <member>` (see `scripts::announce_lua!`).
    /// Wakes that waiter if it is one of ours; the others go on waiting for
    /// their turn.
    fn deliver(&self, channel: &str, message: &[u8]) {
        let mut channels = self.channels();
        let Some(entry) = channels.get_mut(channel) else {
            return;
        };
        if entry.last == message {
            return;
        }
        entry.last = message.to_vec();
        let member = message
            .iter()
            .position(|&b| b == b' ')
            .and_then(|at| std::str::from_utf8(&message[at + 1..]).ok());
        if let Some(notify) = member.and_then(|m| entry.named.get(m)) {
            notify.notify_one();
        }
    }
}

/// A waiter's subscription to the release channels of its resources and its
/// place in their queues; ends (unsubscribing when it was the last, and
/// leaving the queues) on drop.
#[derive(Debug)]
pub(crate) struct Subscription {
    handoff: Weak<Shared>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    channels: Vec<String>,
    nodes: Arc<[Node]>,
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
        quorum::send_all(self.nodes.len(), self.until, |i| {
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
        if self.queued
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (nodes, queues, member, until) = (
                Arc::clone(&self.nodes),
                Arc::clone(&self.queues),
                Arc::clone(&self.member),
                self.until,
            );
            runtime.spawn(async move {
                quorum::send_all(nodes.len(), until, |i| {
                    let (nodes, queues, member) =
                        (Arc::clone(&nodes), Arc::clone(&queues), Arc::clone(&member));
                    async move {
                        let mut cmd = scripts::UNREGISTER.eval(&queues);
                        cmd.arg(&*member);
                        nodes[i].send::<redis::Value>(cmd).await
                    }
                })
                .await;
            });
        }
        let Some(shared) = self.handoff.upgrade() else {
            return;
        };
        let mut channels = shared.channels();
        for name in &self.channels {
            let last = channels.get_mut(name).is_some_and(|c| {
                c.named.remove(&*self.member);
                c.waiters -= 1;
                c.waiters == 0
            });
            if last {
                channels.remove(name);
                for sender in &self.senders {
                    let _ = sender.send(Command::Unsubscribe(name.clone()));
                }
            }
        }
    }
}

impl Handoff {
    /// Subscribes to the release channels of `resources` on every node and
    /// waits (up to `timeout`) until the nodes confirmed, so that a release
    /// after this returns is not missed. The waiter is not queued yet (see
    /// [`Subscription::register`]); its queue entries last until `wait_until`
    /// plus a margin.
    pub(crate) async fn subscribe(
        &self,
        nodes: &Arc<[Node]>,
        resources: &[String],
        timeout: Duration,
        wait_until: Instant,
    ) -> Subscription {
        let senders = self.senders(nodes);
        let names: Vec<String> = resources.iter().map(|r| channel(r)).collect();
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let until = wait_until + QUEUE_MARGIN;
        let deadline_ms = (since_epoch + until.saturating_duration_since(Instant::now())).as_millis();
        let member: Arc<str> = format!("{deadline_ms}:{:016x}", rand::random::<u64>()).into();
        let mine = Arc::new(Notify::new());
        let mut confirmations = Vec::new();
        {
            let mut channels = self.shared.channels();
            for name in &names {
                let entry = channels.entry(name.clone()).or_insert_with(|| Channel {
                    waiters: 0,
                    named: HashMap::new(),
                    last: Vec::new(),
                });
                entry.waiters += 1;
                entry.named.insert(member.to_string(), Arc::clone(&mine));
                if entry.waiters == 1 {
                    for sender in &senders {
                        let (done, confirmed) = oneshot::channel();
                        if sender.send(Command::Subscribe(name.clone(), done)).is_ok() {
                            confirmations.push(confirmed);
                        }
                    }
                }
            }
        }
        // A node that cannot confirm in time is covered by polling.
        let _ = tokio::time::timeout(timeout, futures::future::join_all(confirmations)).await;
        Subscription {
            handoff: Arc::downgrade(&self.shared),
            senders,
            channels: names,
            nodes: Arc::clone(nodes),
            queues: resources.iter().map(|r| queue(r)).collect(),
            place: u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX),
            member,
            until,
            mine,
            queued: false,
        }
    }

    /// The command senders of every node's subscriber task, starting those
    /// that are not running.
    fn senders(&self, nodes: &Arc<[Node]>) -> Vec<mpsc::UnboundedSender<Command>> {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.resize_with(nodes.len(), || None);
        (0..nodes.len())
            .map(|i| {
                if let Some(sender) = tasks[i].as_ref().filter(|s| !s.is_closed()) {
                    return sender.clone();
                }
                let (sender, commands) = mpsc::unbounded_channel();
                tokio::spawn(subscriber(
                    Arc::clone(nodes),
                    i,
                    Arc::downgrade(&self.shared),
                    commands,
                ));
                tasks[i] = Some(sender.clone());
                sender
            })
            .collect()
    }
}

/// One node's pub/sub connection: applies subscribe commands, delivers
/// messages, and reconnects and resubscribes when the connection drops. Ends
/// when the client is gone.
async fn subscriber(
    nodes: Arc<[Node]>,
    index: usize,
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let node = &nodes[index];
    loop {
        let connected = tokio::time::timeout(node.connect_timeout(), node.client().get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            tokio::time::sleep(RESUBSCRIBE_DELAY).await;
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
        let current: Vec<String> = match shared.upgrade() {
            Some(shared) => shared.channels().keys().cloned().collect(),
            None => return,
        };
        if !current.is_empty() && sink.subscribe(&current).await.is_err() {
            // E.g. no channel permission: retry at the reconnect pace.
            tokio::time::sleep(RESUBSCRIBE_DELAY).await;
            continue;
        }
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
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(name, done)) => {
                        if sink.subscribe(&name).await.is_err() {
                            break;
                        }
                        let _ = done.send(());
                    }
                    Some(Command::Unsubscribe(name)) => {
                        if sink.unsubscribe(&name).await.is_err() {
                            break;
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
        tokio::time::sleep(RESUBSCRIBE_DELAY).await;
    }
}
