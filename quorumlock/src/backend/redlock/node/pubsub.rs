//! A node's pub/sub connection: one channel, subscribed while someone
//! listens, kept alive, and re-established after the node drops it.
//!
//! The hand-off uses it for wake-ups (each client listens on its own
//! channel); what the messages mean is the listener's business.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Node;
use crate::config::{LINGER, PUBSUB_PING, RESUBSCRIBE_BASE, RESUBSCRIBE_CAP};
use crate::random;

/// Who receives a channel's messages.
pub(crate) trait Listener: Send + Sync {
    /// A message on `channel`.
    fn deliver(&self, channel: &str, message: &[u8]);

    /// Nobody waits for messages: the channel may be unsubscribed (after
    /// [`LINGER`]).
    fn idle(&self) -> bool;

    /// The channel was subscribed on a connection where it was not: the
    /// messages published before (while no connection was subscribed) were
    /// not heard.
    fn subscribed(&self);
}

/// What the listener's side asks of a subscriber task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Subscribe the channel; answer once the node confirmed.
    Subscribe(oneshot::Sender<()>),
    /// Nobody listens any more: unsubscribe after [`LINGER`].
    Unsubscribe,
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
        step / 2 + step.mul_f64(random::fraction() / 2.0)
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

/// One node's pub/sub connection for `channel`: applies subscribe commands,
/// hands messages to the listener, and reconnects and resubscribes when the
/// connection drops. Ends when the listener is gone or the command sender is
/// dropped.
pub(crate) async fn subscriber(
    nodes: Arc<[Node]>,
    index: usize,
    listener: Weak<dyn Listener>,
    channel: String,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let node = &nodes[index];
    let mut backoff = Backoff::new();
    loop {
        let connection = match Connection::open(node, &listener, &channel).await {
            Opened::Working(connection) => connection,
            Opened::Unreachable => {
                tokio::time::sleep(backoff.pause()).await;
                // Confirm nothing while down: waiters go on without this
                // node, and it wakes them once it subscribes.
                while let Ok(command) = commands.try_recv() {
                    drop(command);
                }
                if listener.strong_count() == 0 {
                    return;
                }
                continue;
            }
            Opened::Silent => {
                // E.g. no channel permission: retry at the reconnect pace.
                tokio::time::sleep(backoff.pause()).await;
                continue;
            }
            Opened::NoListener => return,
        };
        backoff.reset();
        if connection.serve(node, &listener, &channel, &mut commands).await == Served::Ended {
            return;
        }
        tracing::debug!(node = node.name(), "pub/sub connection lost, resubscribing");
        tokio::time::sleep(backoff.pause()).await;
    }
}

/// One pub/sub connection to a node.
struct Connection {
    sink: PubSubSink,
    stream: PubSubStream,
    /// Whether the channel is subscribed on this connection.
    subscribed: bool,
    /// Until when the channel stays subscribed with no waiter (see
    /// [`LINGER`]).
    linger_until: Option<Instant>,
}

/// How opening a connection went.
enum Opened {
    /// The node answered on it.
    Working(Connection),
    /// No connection within the connect timeout.
    Unreachable,
    /// Connected, but the node did not answer the subscription or `PING`.
    Silent,
    /// Nobody listens any more: the subscriber ends.
    NoListener,
}

/// Why serving a connection stopped.
#[derive(PartialEq, Eq)]
enum Served {
    /// The connection broke or stopped answering: reconnect.
    Lost,
    /// The listener or the command sender is gone: the subscriber ends.
    Ended,
}

impl Connection {
    /// Connects, and subscribes the channel if someone waits. The
    /// connection counts as working once the node answered on it (the
    /// subscription's confirmation, or a `PING`): a node that accepts
    /// connections and then drops or ignores them is backed off like one
    /// that refuses them.
    async fn open(node: &Node, listener: &Weak<dyn Listener>, channel: &str) -> Opened {
        let connect = node.pubsub();
        let connected = tokio::time::timeout(node.connect_timeout(), connect).await;
        let Ok(Ok(pubsub)) = connected else {
            return Opened::Unreachable;
        };
        let (mut sink, stream) = pubsub.split();
        let waiting = match listener.upgrade() {
            Some(listener) => !listener.idle(),
            None => return Opened::NoListener,
        };
        let answered = if waiting {
            tokio::time::timeout(node.connect_timeout(), sink.subscribe(channel)).await
        } else {
            tokio::time::timeout(node.connect_timeout(), sink.ping::<redis::Value>())
                .await
                .map(|pong| pong.map(drop))
        };
        if !matches!(answered, Ok(Ok(()))) {
            return Opened::Silent;
        }
        if waiting && let Some(listener) = listener.upgrade() {
            listener.subscribed();
        }
        Opened::Working(Connection {
            sink,
            stream,
            subscribed: waiting,
            linger_until: None,
        })
    }

    /// Applies commands, delivers messages and pings the node every
    /// [`PUBSUB_PING`], until the connection is lost or the subscriber ends.
    async fn serve(
        mut self,
        node: &Node,
        listener: &Weak<dyn Listener>,
        channel: &str,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Served {
        let mut health = tokio::time::interval(PUBSUB_PING);
        health.tick().await;
        loop {
            let went_on = tokio::select! {
                // Ready branches are taken in the order written: a simulated run
                // replays the same for the same seed (the `sim` feature).
                biased;
                _ = health.tick() => {
                    let ping = tokio::time::timeout(node.connect_timeout(), self.sink.ping::<redis::Value>()).await;
                    matches!(ping, Ok(Ok(_)))
                }
                () = sleep_until_some(self.linger_until) => self.linger_over(listener, channel).await,
                command = commands.recv() => match command {
                    None => return Served::Ended,
                    Some(command) => self.apply(command, listener, channel).await,
                },
                message = self.stream.next() => match (message, listener.upgrade()) {
                    (Some(message), Some(listener)) => {
                        listener.deliver(message.get_channel_name(), message.get_payload_bytes());
                        true
                    }
                    (None, _) => false,
                    (_, None) => return Served::Ended,
                },
            };
            if !went_on {
                return Served::Lost;
            }
        }
    }

    /// The linger after the last waiter passed: unsubscribes, unless a
    /// waiter joined meanwhile (its Subscribe, still queued, is confirmed
    /// at once). `false` when the connection failed.
    async fn linger_over(&mut self, listener: &Weak<dyn Listener>, channel: &str) -> bool {
        self.linger_until = None;
        let idle = listener.upgrade().is_none_or(|listener| listener.idle());
        if idle {
            self.subscribed = false;
            return self.sink.unsubscribe(channel).await.is_ok();
        }
        true
    }

    /// Applies one command of the listener's side; `false` when the
    /// connection failed.
    async fn apply(&mut self, command: Command, listener: &Weak<dyn Listener>, channel: &str) -> bool {
        match command {
            Command::Subscribe(done) => {
                self.linger_until = None;
                if !self.subscribed {
                    if self.sink.subscribe(channel).await.is_err() {
                        return false;
                    }
                    self.subscribed = true;
                    if let Some(listener) = listener.upgrade() {
                        listener.subscribed();
                    }
                }
                let _ = done.send(());
            }
            Command::Unsubscribe => {
                if self.subscribed {
                    self.linger_until = Some(Instant::now() + LINGER);
                }
            }
        }
        true
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
