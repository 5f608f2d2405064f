//! A node's data (its databases and pub/sub channels) and what a command
//! runs against.

use std::collections::BTreeMap;

use tokio::sync::mpsc::UnboundedSender;

use super::keyspace::Keyspace;
use super::resp::Reply;

/// How many databases a node has (Redis' default `databases 16`).
pub const DATABASES: usize = 16;

/// Writes between two sweeps of expired keys: keys that are never read
/// again must not pile up over a long simulation.
const SWEEP_EVERY: u64 = 1024;

/// The subscribers of each channel: a sender per subscribed connection.
#[derive(Debug, Default)]
pub struct Channels {
    subscribers: BTreeMap<Vec<u8>, BTreeMap<u64, UnboundedSender<Reply>>>,
}

impl Channels {
    /// Subscribes connection `id` to `channel`.
    pub fn subscribe(&mut self, channel: &[u8], id: u64, sender: UnboundedSender<Reply>) {
        self.subscribers
            .entry(channel.to_vec())
            .or_default()
            .insert(id, sender);
    }

    /// Unsubscribes connection `id` from `channel`.
    pub fn unsubscribe(&mut self, channel: &[u8], id: u64) {
        if let Some(subscribers) = self.subscribers.get_mut(channel) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                self.subscribers.remove(channel);
            }
        }
    }

    /// Delivers `message` to `channel`'s subscribers; how many got it.
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> i64 {
        let Some(subscribers) = self.subscribers.get(channel) else {
            return 0;
        };
        let push = Reply::Array(vec![
            Reply::bulk("message"),
            Reply::bulk(channel),
            Reply::bulk(message),
        ]);
        let delivered = subscribers.values().filter(|s| s.send(push.clone()).is_ok());
        i64::try_from(delivered.count()).unwrap_or(i64::MAX)
    }

    /// Drops every subscription (a crash).
    pub fn clear(&mut self) {
        self.subscribers.clear();
    }
}

/// A node's data: its databases and its channels.
#[derive(Debug)]
pub struct Store {
    /// The databases, `SELECT`ed by index.
    pub dbs: Vec<Keyspace>,
    /// Pub/sub.
    pub channels: Channels,
    writes: u64,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            dbs: vec![Keyspace::default(); DATABASES],
            channels: Channels::default(),
            writes: 0,
        }
    }
}

/// What a command runs against.
pub struct Ctx<'a> {
    /// The node's data.
    pub store: &'a mut Store,
    /// The selected database.
    pub db: usize,
    /// The node's clock in unix ms (frozen for a script's duration).
    pub now_ms: i64,
    /// The node's clock in unix µs, for `TIME`.
    pub now_us: i64,
}

impl Ctx<'_> {
    /// The selected database.
    pub fn keys(&mut self) -> &mut Keyspace {
        let db = self.db.min(DATABASES - 1);
        &mut self.store.dbs[db]
    }

    pub fn wrote(&mut self) {
        self.store.writes += 1;
        if self.store.writes.is_multiple_of(SWEEP_EVERY) {
            let now = self.now_ms;
            self.store.dbs.iter_mut().for_each(|db| db.sweep(now));
        }
    }
}
