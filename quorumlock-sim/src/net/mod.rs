//! The simulated network: TCP-like byte streams between named hosts, with
//! seeded latency and injectable faults, on Tokio's paused clock.
//!
//! The library's real Redis client runs over [`SimStream`]s in place of TCP
//! sockets, so the simulation exercises its actual connection handling. The
//! model is TCP as the library relies on it:
//!
//! - Each write is a segment, delivered to the peer after a one-way latency
//!   drawn from the network's seeded rng, never before the segment written
//!   before it in the same direction (in-order delivery).
//! - A partition between two hosts, or a black-holed host, holds segments
//!   rather than dropping them, as TCP keeps retransmitting: a segment not
//!   yet delivered when the path is cut is held too, and on heal the held
//!   segments are delivered in order, each after a fresh latency from the
//!   heal instant. A connect across a cut path waits (SYN retransmission)
//!   until the path heals; callers bound it with their own timeout.
//! - Dropping a [`SimStream`] is a close with SO_LINGER 0, as the library's
//!   sockets are: a reset. It takes effect at once on both ends (no RST
//!   travel time, even across a cut path): everything either side had not
//!   read is discarded, and both ends' next read or write fails with
//!   `ConnectionReset`. `poll_shutdown` is an orderly FIN instead: the peer
//!   reads EOF after all the data before it, and a stream dropped after its
//!   shutdown closes in order (its FIN still arrives; what the peer sends it
//!   afterwards is discarded).
//! - Writes never block: buffers are unbounded.
//!
//! Faults, latencies and addresses name hosts: an address's host is what
//! comes before its `:` (`"n0"` for `"n0:6379"`).
//!
//! Determinism: time is only Tokio's (paused) clock, randomness only the
//! network's rng, and every map iterated is ordered; [`Network::trace_hash`]
//! condenses every event with its simulated time so two runs of one seed can
//! be compared. Tokio's timer has millisecond resolution, so a reader waiting
//! for a segment due at a sub-millisecond instant wakes at the next
//! millisecond.

mod state;
mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_redis;
mod trace;

use std::future::poll_fn;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;
use std::{fmt, io};

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use state::{ListenerState, State};
pub use stream::SimStream;
pub use trace::TraceStats;

/// A one-way delay, drawn uniformly from `min..=max` for each segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latency {
    /// The shortest delay.
    pub min: Duration,
    /// The longest delay (taken as `min` if smaller).
    pub max: Duration,
}

impl Latency {
    /// A delay drawn uniformly from `min..=max`.
    pub fn uniform(min: Duration, max: Duration) -> Latency {
        Latency { min, max }
    }

    /// Always exactly `delay`.
    pub fn fixed(delay: Duration) -> Latency {
        Latency {
            min: delay,
            max: delay,
        }
    }
}

/// The simulated network: cheap to clone, every clone the same network.
#[derive(Clone)]
pub struct Network {
    state: Arc<Mutex<State>>,
    /// Signalled whenever a path may have healed, for connects waiting on one.
    paths: Arc<Notify>,
}

impl Network {
    /// A network with no hosts, `latency` between every pair until
    /// [`Network::set_latency`] says otherwise, and its rng seeded by `seed`.
    pub fn new(seed: u64, latency: Latency) -> Network {
        let state = State::new(seed, latency, Instant::now());
        Network {
            state: Arc::new(Mutex::new(state)),
            paths: Arc::new(Notify::new()),
        }
    }

    /// Runs `f` on the state under the lock, then wakes the wakers it
    /// collected: woken only once the lock is free, no woken task can find
    /// it held.
    fn with_state<R>(&self, f: impl FnOnce(&mut State, &mut Vec<Waker>) -> R) -> R {
        let mut wakers = Vec::new();
        let result = {
            // A panic elsewhere while holding the lock leaves the state as
            // consistent as any single step leaves it: carry on with it.
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut state, &mut wakers)
        };
        for waker in wakers {
            waker.wake();
        }
        result
    }

    /// A host starts listening on `addr` (e.g. `"n0:6379"`); connections to
    /// it arrive on the returned listener. Listening again on the same
    /// address replaces (and closes) the previous listener.
    pub fn listen(&self, addr: &str) -> Listener {
        let id = self.with_state(|state, wakers| {
            state.close_listener(addr, None, Instant::now(), wakers);
            let id = state.next_id();
            let listener = ListenerState {
                id,
                backlog: Default::default(),
                acceptor: None,
            };
            state.listeners.insert(addr.to_owned(), listener);
            state.record("listen", Instant::now(), addr, "", id);
            id
        });
        Listener {
            net: self.clone(),
            addr: addr.to_owned(),
            id,
        }
    }

    /// Stops listening on `addr` (the node is down): new connects are
    /// refused, the listener's `accept` returns `None`, and connections it
    /// had not accepted yet are reset. Accepted connections stay up: use
    /// [`Network::reset_connections`] for a crash.
    pub fn close_listener(&self, addr: &str) {
        self.with_state(|state, wakers| state.close_listener(addr, None, Instant::now(), wakers));
    }

    /// Host `from` (e.g. `"c0"`) connects to the address `to`.
    ///
    /// Refused at once if nothing listens on `to`. While the path between
    /// the two hosts is cut (partitioned, or either black-holed) it waits,
    /// as a SYN into a black hole does, so the caller applies its own
    /// timeout; once the path is open it completes after one round trip,
    /// when the listener's `accept` sees the other end.
    pub async fn connect(&self, from: &str, to: &str) -> io::Result<SimStream> {
        loop {
            // Made before the check, so a heal between the check and the
            // await still wakes this connect.
            let healed = self.paths.notified();
            let rtt = self.with_state(|state, _| {
                let open = open_path(state, from, to)?;
                io::Result::Ok(open.then(|| state.sample(from, to) + state.sample(to, from)))
            })?;
            let Some(rtt) = rtt else {
                healed.await;
                continue;
            };
            sleep_until(Instant::now() + rtt).await;
            if let Some(stream) = self.complete_connect(from, to)? {
                return Ok(stream);
            }
        }
    }

    /// The connect's round trip is over: queue the accepted end on the
    /// listener and return the connecting end, or `None` if the path was cut
    /// meanwhile (the connect starts over).
    fn complete_connect(&self, from: &str, to: &str) -> io::Result<Option<SimStream>> {
        let id = self.with_state(|state, wakers| {
            if !open_path(state, from, to)? {
                return io::Result::Ok(None);
            }
            let id = state.open(from, to);
            if let Some(listener) = state.listeners.get_mut(to) {
                listener.backlog.push_back((id, from.to_owned()));
                wakers.extend(listener.acceptor.take());
            }
            state.record("connect", Instant::now(), from, to, id);
            Ok(Some(id))
        })?;
        Ok(id.map(|id| SimStream::new(self.clone(), id, 0, from, to)))
    }

    /// Sets the latency between hosts `a` and `b`, both ways, for segments
    /// sent from now on.
    pub fn set_latency(&self, a: &str, b: &str, latency: Latency) {
        self.with_state(|state, _| state.set_latency(a, b, latency));
    }

    /// Cuts the path between hosts `a` and `b`, both ways.
    pub fn partition(&self, a: &str, b: &str) {
        self.fault(|state| state.partition(a, b, true));
    }

    /// Restores the path between hosts `a` and `b` (if no black hole still
    /// cuts it): what was held is delivered.
    pub fn heal(&self, a: &str, b: &str) {
        self.fault(|state| state.partition(a, b, false));
    }

    /// Cuts every path to and from `host`.
    pub fn black_hole(&self, host: &str) {
        self.fault(|state| state.black_hole(host, true));
    }

    /// Ends `host`'s black hole: paths no partition cuts are restored.
    pub fn unblack_hole(&self, host: &str) {
        self.fault(|state| state.black_hole(host, false));
    }

    fn fault(&self, change: impl FnOnce(&mut State)) {
        self.with_state(|state, wakers| {
            change(state);
            state.refresh_paths(Instant::now(), wakers);
        });
        self.paths.notify_waiters();
    }

    /// Breaks every connection with `host` at either end, as a crash or
    /// restart of the host does: both ends see `ConnectionReset`, and what
    /// was not yet read is discarded.
    pub fn reset_connections(&self, host: &str) {
        self.with_state(|state, wakers| state.reset_host(host, Instant::now(), wakers));
    }

    /// The segment and byte counts and the running hash of every event.
    pub fn trace(&self) -> TraceStats {
        self.with_state(|state, _| state.stats())
    }

    /// The running hash of every network event with its simulated time:
    /// equal for two runs of one seed, almost surely different otherwise.
    pub fn trace_hash(&self) -> u64 {
        self.trace().hash
    }
}

/// Whether a connect from `from` may go through to `to` now: an error
/// (recorded) when nothing listens there, `false` while the path is cut.
fn open_path(state: &mut State, from: &str, to: &str) -> io::Result<bool> {
    if !state.listeners.contains_key(to) {
        state.record("refused", Instant::now(), from, to, 0);
        return Err(io::Error::from(io::ErrorKind::ConnectionRefused));
    }
    Ok(!state.is_cut(from, to))
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Network")
            .field("trace", &self.trace())
            .finish_non_exhaustive()
    }
}

/// A listening address: the accepting side of connects to it.
///
/// Dropping it closes it, as [`Network::close_listener`] does.
#[derive(Debug)]
pub struct Listener {
    net: Network,
    addr: String,
    id: u64,
}

impl Listener {
    /// The address listened on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The next connection made to this address, or `None` once the
    /// listener is closed (or replaced by a new `listen` on its address).
    pub async fn accept(&mut self) -> Option<SimStream> {
        let accepted = poll_fn(|cx| {
            self.net.with_state(|state, _| {
                let Some(listener) = state.listeners.get_mut(&self.addr).filter(|l| l.id == self.id) else {
                    return Poll::Ready(None);
                };
                match listener.backlog.pop_front() {
                    Some(accepted) => Poll::Ready(Some(accepted)),
                    None => {
                        listener.acceptor = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            })
        })
        .await;
        let (id, peer) = accepted?;
        Some(SimStream::new(self.net.clone(), id, 1, &self.addr, &peer))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let (addr, id) = (&self.addr, self.id);
        self.net
            .with_state(|state, wakers| state.close_listener(addr, Some(id), Instant::now(), wakers));
    }
}
