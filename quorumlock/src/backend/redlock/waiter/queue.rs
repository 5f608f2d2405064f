//! A waiter's place in the hand-off queues and its wake-ups.
//!
//! Waiters queue on the nodes, per resource, in the order they started
//! waiting. A release that deletes a key pops the head of its queue and
//! publishes a wake-up for that one waiter on the channel of the waiter's
//! client (see `wire::queue`). So only the named waiter retries at once,
//! wherever it runs, waiters are served first come, first served, and a
//! release costs each node one message, however many processes wait.
//!
//! A client keeps at most one pub/sub connection per node (opened on the
//! first wait, kept while the client lives, re-established after the node
//! drops it: `node::pubsub`) and subscribes its one channel there while it
//! has waiters, reference-counted: nothing per waiter or per resource. The
//! same release heard from several nodes before the waiter woke is folded
//! into one wake-up; heard again after it woke, it wakes the waiter again
//! (its attempt may have reached a node before that node's release).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use super::super::kind::Line;
use super::news;
use crate::backend::redlock::node::pubsub::{self, Command, Listener};
use crate::backend::redlock::quorum::Quorum;
use crate::backend::redlock::wire::keys;
use crate::backend::redlock::wire::queue::{self, QueueEntry, Register, Unregister};
use crate::config::QUEUE_MARGIN;
use crate::tasks::BackgroundWork;
use crate::{metrics, random, wall_clock};

/// Per-client hand-off state, shared by all its waiters.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    mailbox: Arc<Mailbox>,
    /// Command senders to each node's subscriber task, started on first use.
    subscribers: Mutex<Vec<Option<mpsc::UnboundedSender<Command>>>>,
}

/// Where the wake-ups of one client arrive: its id and its waiters.
#[derive(Debug)]
struct Mailbox {
    /// This client's id (random, 64 bits), as queue members carry it and
    /// its channel is named.
    id: String,
    waiters: Mutex<BTreeMap<Arc<str>, Waiting>>,
    /// How many times a node subscribed the channel on a connection where
    /// it was not (see [`Wake::Subscribed`]).
    subscriptions: Arc<news::Count>,
}

impl Default for Mailbox {
    fn default() -> Self {
        Mailbox {
            id: format!("{:016x}", random::u64()),
            waiters: Mutex::default(),
            subscriptions: Arc::default(),
        }
    }
}

/// What woke a waiter that listens for releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release named this waiter (and took it off that node's queue).
    Named,
    /// A node subscribed the client's channel after the waiter got in line:
    /// a confirmation that came after the waiter stopped waiting for it, or
    /// a subscription taken again after the node dropped the connection. A
    /// release on that node before then was not heard, so the waiter tries
    /// again at once, instead of a retry delay later.
    Subscribed,
}

/// One waiter of this client, by queue member.
#[derive(Debug)]
struct Waiting {
    wake: Arc<Notify>,
    /// The token of the last release that named this waiter since the
    /// waiter last woke, to fold that release's messages from several nodes
    /// into one wake-up. Cleared when the waiter wakes: a message of the
    /// same release that comes while the woken waiter's attempt runs wakes
    /// it again, since the attempt may have reached that node before the
    /// release did (and been refused there), and the waiter would otherwise
    /// wait a whole retry delay for a lock that is free by then.
    last: Vec<u8>,
    /// Its queue keys, for a shutdown that takes it off them.
    queues: Arc<[String]>,
}

impl Mailbox {
    fn waiters(&self) -> MutexGuard<'_, BTreeMap<Arc<str>, Waiting>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wakes the waiter a release names, unless the same release already did
/// (from another node) or the waiter is gone.
impl Listener for Mailbox {
    fn deliver(&self, channel: &str, message: &[u8]) {
        if queue::wake_client(channel) != Some(self.id.as_str()) {
            return;
        }
        let Some((token, member)) = queue::wake_up(message) else {
            return;
        };
        if let Some(waiter) = self.waiters().get_mut(member)
            && waiter.last != token
        {
            waiter.last = token.to_vec();
            waiter.wake.notify_one();
            metrics::wakeup();
        }
    }

    fn idle(&self) -> bool {
        self.waiters().is_empty()
    }

    fn subscribed(&self) {
        self.subscriptions.bump();
    }
}

/// A waiter's share of its client's subscription and its place in the
/// queues of its resources; ends (unsubscribing when it was the client's
/// last waiter, and leaving the queues) on drop.
#[derive(Debug)]
pub(crate) struct Subscription {
    handoff: Weak<Mailbox>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    quorum: Arc<Quorum>,
    /// This waiter's queue keys, place and member.
    queues: Arc<[String]>,
    place: u64,
    member: Arc<str>,
    /// Until when the queue entry is kept (the waiter's deadline plus
    /// [`QUEUE_MARGIN`]).
    expires: Instant,
    /// Woken by releases that name this waiter.
    mine: Arc<Notify>,
    /// Changes when a node subscribes the channel anew.
    subscriptions: news::Watcher,
    /// Registered on the nodes and not known to be off every queue.
    queued: bool,
}

impl Subscription {
    /// Completes on a release of any of the resources that names this
    /// waiter (which took it off that node's queue), or when a node
    /// subscribed the channel anew. Cancel safe: what comes while nobody
    /// listens is kept for the next call.
    pub(crate) async fn woken(&mut self) -> Wake {
        tokio::select! {
            // Ready branches are taken in the order written: a simulated run
            // replays the same for the same seed (the `sim` feature).
            biased;
            () = self.mine.notified() => {
                self.rearm();
                Wake::Named
            }
            () = self.subscriptions.changed() => Wake::Subscribed,
        }
    }

    /// Lets the next message of a release that already woke this waiter
    /// wake it again (see [`Waiting::last`]).
    fn rearm(&self) {
        if let Some(mailbox) = self.handoff.upgrade()
            && let Some(waiting) = mailbox.waiters().get_mut(&self.member)
        {
            waiting.last.clear();
        }
    }

    /// Forgets the releases that named this waiter so far.
    pub(crate) fn forget_named(&self) {
        let _ = self.mine.notified().now_or_never();
    }

    /// This waiter's queue entry, for an attempt that queues it where the
    /// resource is held; `None` once its deadline has passed.
    pub(crate) fn entry(&mut self) -> Option<QueueEntry> {
        let left = self.expires.checked_duration_since(Instant::now())?;
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
        let Some(entry) = self.entry() else {
            return;
        };
        let all: Vec<usize> = (0..self.quorum.len()).collect();
        self.quorum
            .tell(&all, self.expires, Arc::new(Register(entry)))
            .await;
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
            let (quorum, queues, member, expires) = (
                Arc::clone(&self.quorum),
                Arc::clone(&self.queues),
                Arc::clone(&self.member),
                self.expires,
            );
            self.quorum
                .tasks
                .spawn_if_running(BackgroundWork::Queue, async move {
                    let all: Vec<usize> = (0..quorum.len()).collect();
                    quorum
                        .tell(&all, expires, Arc::new(Unregister { queues, member }))
                        .await;
                });
        }
        let Some(mailbox) = self.handoff.upgrade() else {
            return;
        };
        let mut waiters = mailbox.waiters();
        if waiters.remove(&self.member).is_some() && waiters.is_empty() {
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
    /// returns is not missed; a node that subscribes later wakes the waiter
    /// ([`Wake::Subscribed`]). The waiter is not queued yet (see
    /// [`Subscription::register`]); its queue entries last until
    /// `wait_until` plus a margin.
    pub(crate) async fn subscribe(
        &self,
        quorum: &Arc<Quorum>,
        resources: &[String],
        timeout: Duration,
        wait_until: Instant,
    ) -> Subscription {
        let senders = self.senders(quorum);
        let since_epoch = wall_clock::since_epoch();
        let expires = wait_until + QUEUE_MARGIN;
        let deadline_ms = (since_epoch + expires.saturating_duration_since(Instant::now())).as_millis();
        let member = QueueEntry::member(deadline_ms, &self.mailbox.id, random::u64());
        let mine = Arc::new(Notify::new());
        let queues: Arc<[String]> = resources.iter().map(|r| keys::queue(r)).collect();
        let mut confirmations = Vec::new();
        {
            let mut waiters = self.mailbox.waiters();
            let first = waiters.is_empty();
            let waiting = Waiting {
                wake: Arc::clone(&mine),
                last: Vec::new(),
                queues: Arc::clone(&queues),
            };
            waiters.insert(Arc::clone(&member), waiting);
            if first {
                for sender in &senders {
                    let (done, confirmed) = oneshot::channel();
                    if sender.send(Command::Subscribe(done)).is_ok() {
                        confirmations.push(confirmed);
                    }
                }
            }
        }
        let _ = tokio::time::timeout(timeout, futures::future::join_all(confirmations)).await;
        // Subscriptions from now on are news to this waiter.
        let subscriptions = self.mailbox.subscriptions.watch();
        Subscription {
            handoff: Arc::downgrade(&self.mailbox),
            senders,
            quorum: Arc::clone(quorum),
            queues,
            place: u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX),
            member,
            expires,
            mine,
            subscriptions,
            queued: false,
        }
    }

    /// Takes every waiter of this client off its queues on every node (at
    /// shutdown: a waiter's own task may not run again before its program
    /// exits, and an entry left behind would be named by releases in place
    /// of live waiters until its deadline). Not awaited, as
    /// [`Quorum::tell`]: a shutdown waits for its tracked work.
    pub(crate) async fn leave_all(&self, quorum: &Quorum, finish_by: Instant) {
        let queued: Vec<(Arc<str>, Arc<[String]>)> = self
            .mailbox
            .waiters()
            .iter()
            .map(|(member, waiting)| (Arc::clone(member), Arc::clone(&waiting.queues)))
            .collect();
        let all: Vec<usize> = (0..quorum.len()).collect();
        for (member, queues) in queued {
            quorum
                .tell(&all, finish_by, Arc::new(Unregister { queues, member }))
                .await;
        }
    }

    /// The command senders of every node's subscriber task, starting those
    /// that are not running (also those whose runtime shut down: their
    /// receiver was dropped with them, which closes the sender).
    fn senders(&self, quorum: &Arc<Quorum>) -> Vec<mpsc::UnboundedSender<Command>> {
        let mut running = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        running.resize_with(quorum.len(), || None);
        (0..quorum.len())
            .map(|i| {
                if let Some(sender) = running[i].as_ref().filter(|s| !s.is_closed()) {
                    return sender.clone();
                }
                let (sender, commands) = mpsc::unbounded_channel();
                let mailbox: Arc<dyn Listener> = self.mailbox.clone();
                let listener = Arc::downgrade(&mailbox);
                let subscriber = pubsub::subscriber(
                    Arc::clone(&quorum.nodes),
                    i,
                    listener,
                    keys::wake_channel(&self.mailbox.id),
                    commands,
                );
                let closing = quorum.tasks.closing().clone();
                quorum.tasks.spawn(BackgroundWork::Subscription, async move {
                    // A shutdown ends it, connected or not.
                    tokio::select! {
                        // Ready branches are taken in the order written: a simulated run
                        // replays the same for the same seed (the `sim` feature).
                        biased;
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

/// A waiter's place in line as one attempt carries it (see [`Line`]): the
/// attempt's requests queue the waiter where the resource is held, and this
/// takes the entry off the queues where it must not stay.
///
/// A refusal can come after the majority that took the lock, from a node
/// the attempt stopped waiting for. Its entry must be removed as well: the
/// late release that made the node refuse pops only the head of its queue,
/// and when that node lags by more than one hand-off, the head is an
/// earlier waiter, so the entry would stay (and be named by a later release
/// in place of a live waiter) until its deadline. Refusals before the lock
/// is taken are collected and left together once it is; later ones are
/// left by their own request. Costs nothing when every node grants, and one
/// command per refusing node when the attempt takes the lock.
pub(crate) struct Place {
    quorum: Arc<Quorum>,
    entry: Arc<QueueEntry>,
    /// The nodes that refused so far; `None` once the lock was taken.
    refused: Mutex<Option<Vec<usize>>>,
}

impl Place {
    pub(crate) fn new(quorum: &Arc<Quorum>, entry: QueueEntry) -> Place {
        Place {
            quorum: Arc::clone(quorum),
            entry: Arc::new(entry),
            refused: Mutex::new(Some(Vec::new())),
        }
    }

    fn refused(&self) -> MutexGuard<'_, Option<Vec<usize>>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the waiter off its queues on the nodes `which`, without waiting
    /// for the replies (see [`Quorum::tell`]): each removal runs after the
    /// attempt on its node's connection.
    fn leave(&self, which: Vec<usize>, finish_by: Instant) -> BoxFuture<'static, ()> {
        let (quorum, entry) = (Arc::clone(&self.quorum), Arc::clone(&self.entry));
        Box::pin(async move {
            if which.is_empty() {
                return;
            }
            let unregister = Unregister {
                queues: Arc::clone(&entry.queues),
                member: Arc::clone(&entry.member),
            };
            quorum.tell(&which, finish_by, Arc::new(unregister)).await;
        })
    }
}

impl Line for Place {
    fn entry(&self) -> &Arc<QueueEntry> {
        &self.entry
    }

    fn refused(&self, node: usize, finish_by: Instant) -> Option<BoxFuture<'static, ()>> {
        match &mut *self.refused() {
            Some(refused) => {
                refused.push(node);
                None
            }
            None => Some(self.leave(vec![node], finish_by)),
        }
    }

    /// The nodes that granted took the waiter off their queue in the same
    /// call; those that refused so far still list it.
    fn taken(&self, finish_by: Instant) -> BoxFuture<'static, ()> {
        let refused = self.refused().take().unwrap_or_default();
        self.leave(refused, finish_by)
    }
}
