//! The simulated Redis node: what the library's real client talks to, over
//! an in-memory stream, in place of a `redis-server`.
//!
//! It speaks RESP2 and answers the commands the library (and redis-rs'
//! connection handshake) sends as Redis 7.0 does, runs the library's Lua
//! scripts in an embedded Lua 5.1 with Redis' conversions, and keeps time
//! on its own clock (offset and rate relative to the simulation's Tokio
//! clock), so that expiry follows a skewed, jumping or drifting node clock.
//! Faults: a crash (with or without persistence), a pause (as `SIGSTOP`),
//! a clock change, a script cache flush.
//!
//! Deterministic: it reads only the Tokio clock, draws nothing at random
//! and keeps everything it lists in ordered maps.

mod commands;
mod conn;
mod errors;
mod keyspace;
mod lua;
mod num;
mod resp;
mod signal;
mod store;
mod strings;
mod zset;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::conn::Conn;
use self::keyspace::Data;
use self::lua::Scripting;
use self::resp::Reply;
use self::signal::Watched;
use self::store::Store;

pub use self::lua::sha1;

/// A node's clock: its unix time in ms is `epoch_ms + offset_ms + rate *
/// (simulated time elapsed since start)`.
#[derive(Clone, Copy, Debug)]
pub struct NodeClock {
    /// Fixed skew from the simulation's epoch, in ms.
    pub offset_ms: i64,
    /// How fast the clock runs: 1.0 is true time, 1.01 is 1% fast.
    pub rate: f64,
}

impl Default for NodeClock {
    fn default() -> Self {
        NodeClock {
            offset_ms: 0,
            rate: 1.0,
        }
    }
}

/// One simulated Redis node, shared by its connections (clones are the
/// same node).
#[derive(Clone)]
pub struct SimNode {
    inner: Arc<Mutex<Inner>>,
    /// Bumped by every crash: each connection ends when it changes.
    crash: Arc<Watched<u64>>,
    /// Whether the node is paused.
    paused: Arc<Watched<bool>>,
}

/// The node's state, behind the lock its connections take for one command
/// (or one script) at a time: Redis' single thread.
struct Inner {
    name: String,
    epoch_ms: u64,
    start: Instant,
    clock: NodeClock,
    store: Store,
    scripting: Scripting,
    next_id: u64,
}

impl Inner {
    /// The node's clock in unix µs.
    fn now_us(&self) -> i64 {
        let elapsed = Instant::now().saturating_duration_since(self.start).as_micros() as f64;
        let epoch_us = (i64::try_from(self.epoch_ms).unwrap_or(i64::MAX) + self.clock.offset_ms) * 1000;
        epoch_us + (self.clock.rate * elapsed) as i64
    }

    /// The node's clock in unix ms.
    fn now_ms(&self) -> i64 {
        self.now_us().div_euclid(1000)
    }

    fn open(&mut self, pushes: mpsc::UnboundedSender<Reply>) -> Conn {
        self.next_id += 1;
        Conn {
            id: self.next_id,
            db: 0,
            channels: Default::default(),
            pushes,
            name: None,
        }
    }

    fn close(&mut self, conn: &Conn) {
        for channel in &conn.channels {
            self.store.channels.unsubscribe(channel, conn.id);
        }
    }
}

impl SimNode {
    /// A node named `name` (for logs), whose clock reads `epoch_ms` (plus
    /// `clock.offset_ms`) at the simulated instant `start` and then runs at
    /// `clock.rate`.
    pub fn new(name: &str, epoch_ms: u64, start: Instant, clock: NodeClock) -> SimNode {
        let inner = Inner {
            name: name.to_owned(),
            epoch_ms,
            start,
            clock,
            store: Store::default(),
            scripting: Scripting::new(),
            next_id: 0,
        };
        SimNode {
            inner: Arc::new(Mutex::new(inner)),
            crash: Arc::new(Watched::new(0)),
            paused: Arc::new(Watched::new(false)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic mid-command is a bug the simulation reports by itself;
        // the state it left is still the best there is to look at.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The node's name.
    pub fn name(&self) -> String {
        self.lock().name.clone()
    }

    /// Serves one client connection until it closes (EOF or error) or the
    /// node crashes; the caller spawns it.
    pub async fn serve<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        conn::serve(self.clone(), stream).await;
    }

    /// Crashes (and at once restarts) the node: every open connection ends,
    /// dropping its stream; the keys survive only with `persistence` (with
    /// their absolute expiry on the node's clock); the script cache and the
    /// subscriptions never do.
    pub fn crash(&self, persistence: bool) {
        {
            let mut inner = self.lock();
            inner.store.channels.clear();
            if !persistence {
                inner.store = Store::default();
            }
            inner.scripting = Scripting::new();
        }
        self.crash.update(|generation| *generation += 1);
    }

    /// Pauses the node, as `SIGSTOP`: it reads and runs nothing, and its
    /// connections stay open.
    pub fn pause(&self) {
        self.paused.update(|paused| *paused = true);
    }

    /// Whether the node is paused now.
    pub fn is_paused(&self) -> bool {
        self.paused.get()
    }

    /// Resumes a paused node: it answers what arrived meanwhile.
    pub fn resume(&self) {
        self.paused.update(|paused| *paused = false);
    }

    /// Changes the node's clock (a jump: a new offset; a drift: a new rate).
    pub fn set_clock(&self, clock: NodeClock) {
        self.lock().clock = clock;
    }

    /// The node's clock.
    pub fn clock(&self) -> NodeClock {
        self.lock().clock
    }

    /// `SCRIPT FLUSH`: every `EVALSHA` fails with `NOSCRIPT` until the
    /// script is loaded again.
    pub fn script_flush(&self) {
        self.lock().scripting = Scripting::new();
    }

    /// The node's clock, unix ms.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.lock().now_ms()).unwrap_or(0)
    }

    /// Every key of database 0 not expired by the node's clock, with its
    /// value (a string's, lossily UTF-8) or its type's name, sorted by key.
    pub fn live_keys(&self) -> Vec<(String, String)> {
        let inner = self.lock();
        let now = inner.now_ms();
        inner.store.dbs[0]
            .live(now)
            .map(|(key, entry)| {
                let value = match &entry.data {
                    Data::Str(value) => String::from_utf8_lossy(value).into_owned(),
                    other => other.type_name().to_owned(),
                };
                (String::from_utf8_lossy(key).into_owned(), value)
            })
            .collect()
    }

    /// The string at `key` in database 0, if it holds a live one.
    pub fn get(&self, key: &str) -> Option<String> {
        let mut inner = self.lock();
        let now = inner.now_ms();
        match inner.store.dbs[0].get(key.as_bytes(), now) {
            Some(keyspace::Entry {
                data: Data::Str(value),
                ..
            }) => Some(String::from_utf8_lossy(value).into_owned()),
            _ => None,
        }
    }

    /// The remaining time to live of `key` in database 0 in ms, by the
    /// node's clock: `None` for a missing key, `Some(None)` for no expiry.
    pub fn pttl(&self, key: &str) -> Option<Option<u64>> {
        let mut inner = self.lock();
        let now = inner.now_ms();
        let entry = inner.store.dbs[0].get(key.as_bytes(), now)?;
        Some(entry.expires_at.map(|at| u64::try_from(at - now).unwrap_or(0)))
    }
}
