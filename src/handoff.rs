//! Fast hand-off: waiters are woken by release notifications instead of
//! polling alone.
//!
//! The release script publishes our token on `quorumlock:released:<resource>`
//! on every node where it deleted the key. A client keeps at most one pub/sub
//! connection per node (opened on the first wait, kept while the client
//! lives, re-established and resubscribed after the node drops it), shared by
//! all its waiters, with reference-counted channel subscriptions: nothing per
//! waiter, and a channel is unsubscribed as soon as its last waiter is gone.
//!
//! One release arrives once per node that held the key; the messages carry
//! the released token, so they are folded into one wake-up, which goes to one
//! local waiter (first come, first served): the other waiters of this process
//! would only lose the race to it. Waiters in other processes get their own
//! message. Polling with a capped, jittered backoff stays underneath, for
//! releases by other libraries (no message), expiry of a crashed holder's
//! key, and lost messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::node::Node;

/// Pause before reconnecting a dropped pub/sub connection; a node that is
/// down is retried at this pace (waiters keep polling meanwhile).
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(100);

/// How often an idle pub/sub connection is checked with a PING. A connection
/// can die without the client noticing (a half-open socket, a black-holed
/// network path); the check bounds how long waiters miss notifications from
/// that node (they keep polling meanwhile).
const PUBSUB_PING: Duration = Duration::from_secs(1);

/// The pub/sub channel announcing releases of `resource`.
pub(crate) fn channel(resource: &str) -> String {
    format!("quorumlock:released:{resource}")
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
    notify: Arc<Notify>,
    /// The token of the last release seen, to fold one release's messages
    /// from several nodes into one wake-up.
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

    fn deliver(&self, channel: &str, token: &[u8]) {
        if let Some(entry) = self.channels().get_mut(channel)
            && entry.last != token
        {
            entry.last = token.to_vec();
            entry.notify.notify_one();
        }
    }
}

/// A waiter's subscription to the release channels of its resources; ends
/// (and unsubscribes when it was the last) on drop.
#[derive(Debug)]
pub(crate) struct Subscription {
    handoff: Weak<Shared>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    channels: Vec<String>,
    notifies: Vec<Arc<Notify>>,
}

impl Subscription {
    /// Completes on a release of any of the resources (one waiter per release).
    pub(crate) async fn released(&self) {
        let waits = self.notifies.iter().map(|n| Box::pin(n.notified()));
        futures::future::select_all(waits).await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(shared) = self.handoff.upgrade() else {
            return;
        };
        let mut channels = shared.channels();
        for name in &self.channels {
            let last = channels.get_mut(name).is_some_and(|c| {
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
    /// after this returns is not missed.
    pub(crate) async fn subscribe(
        &self,
        nodes: &Arc<[Node]>,
        resources: &[String],
        timeout: Duration,
    ) -> Subscription {
        let senders = self.senders(nodes);
        let names: Vec<String> = resources.iter().map(|r| channel(r)).collect();
        let mut notifies = Vec::new();
        let mut confirmations = Vec::new();
        {
            let mut channels = self.shared.channels();
            for name in &names {
                let entry = channels.entry(name.clone()).or_insert_with(|| Channel {
                    waiters: 0,
                    notify: Arc::new(Notify::new()),
                    last: Vec::new(),
                });
                entry.waiters += 1;
                notifies.push(Arc::clone(&entry.notify));
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
            notifies,
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
