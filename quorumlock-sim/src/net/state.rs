//! The network's shared state: connections and their two byte pipes, the
//! listeners, the faults in force, the seeded randomness and the trace.
//!
//! Everything here runs under the network's one mutex and never awaits; the
//! async and poll faces in `mod.rs` and `stream.rs` lock, call in, and wake
//! the collected wakers once the lock is released.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::task::Waker;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::Latency;
use super::trace::{Fnv, TraceStats};

/// The host part of an address: `"n0"` for `"n0:6379"`. Faults and latencies
/// apply to hosts, so a node's listener and its client connections share them.
pub(super) fn host_of(addr: &str) -> &str {
    addr.split_once(':').map_or(addr, |(host, _)| host)
}

/// Hosts as an unordered pair, the key of a partition or a latency override.
fn pair(a: &str, b: &str) -> (String, String) {
    let (a, b) = (host_of(a), host_of(b));
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// One `poll_write`'s bytes (or, with `fin`, the writer's orderly close).
struct Segment {
    /// When the reader may see it; `None` while held behind a cut path.
    at: Option<Instant>,
    data: Vec<u8>,
    /// How much of `data` the reader has consumed already.
    read: usize,
    fin: bool,
}

/// One direction of a connection, in delivery order.
#[derive(Default)]
struct Pipe {
    segments: VecDeque<Segment>,
    reader: Option<Waker>,
}

impl Pipe {
    fn wake_reader(&mut self, wakers: &mut Vec<Waker>) {
        wakers.extend(self.reader.take());
    }

    fn discard(&mut self, wakers: &mut Vec<Waker>) {
        self.segments.clear();
        self.wake_reader(wakers);
    }
}

/// A connection: side 0 is the connecting end, side 1 the accepted end, and
/// `pipes[s]` carries what side `s` writes.
struct Conn {
    hosts: [String; 2],
    pipes: [Pipe; 2],
    reset: bool,
    shut: [bool; 2],
    dropped: [bool; 2],
}

/// What a read found, for `SimStream::poll_read` to act on.
pub(super) enum ReadOutcome {
    /// This many bytes were copied.
    Data(usize),
    /// The peer's FIN was reached after all its data.
    Eof,
    Reset,
    /// Nothing readable yet; the next segment arrives at the given instant
    /// (`None`: nothing in flight, only new data or a heal will wake).
    Wait(Option<Instant>),
}

/// What a write did.
pub(super) enum WriteOutcome {
    Sent,
    Reset,
    /// This end already shut its writing half down.
    Shut,
}

/// A listening address's backlog of connections not accepted yet.
pub(super) struct ListenerState {
    pub(super) id: u64,
    pub(super) backlog: VecDeque<(u64, String)>,
    pub(super) acceptor: Option<Waker>,
}

/// The state behind `Network`'s mutex.
pub(super) struct State {
    rng: StdRng,
    start: Instant,
    default_latency: Latency,
    latencies: BTreeMap<(String, String), Latency>,
    partitions: BTreeSet<(String, String)>,
    black_holes: BTreeSet<String>,
    pub(super) listeners: BTreeMap<String, ListenerState>,
    conns: BTreeMap<u64, Conn>,
    next_id: u64,
    trace: Fnv,
    segments: u64,
    bytes: u64,
}

impl State {
    pub(super) fn new(seed: u64, latency: Latency, start: Instant) -> State {
        State {
            rng: StdRng::seed_from_u64(seed),
            start,
            default_latency: latency,
            latencies: BTreeMap::new(),
            partitions: BTreeSet::new(),
            black_holes: BTreeSet::new(),
            listeners: BTreeMap::new(),
            conns: BTreeMap::new(),
            next_id: 0,
            trace: Fnv::new(),
            segments: 0,
            bytes: 0,
        }
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Microseconds since the network was made: tokio's `Instant` itself
    /// carries the process's real start time, which differs between runs.
    fn elapsed_us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_micros()).unwrap_or(u64::MAX)
    }

    /// Adds an event to the trace hash: a tag, the time, two names, a number.
    pub(super) fn record(&mut self, tag: &str, now: Instant, a: &str, b: &str, n: u64) {
        let us = self.elapsed_us(now);
        self.trace.str(tag);
        self.trace.u64(us);
        self.trace.str(a);
        self.trace.str(b);
        self.trace.u64(n);
    }

    pub(super) fn stats(&self) -> TraceStats {
        TraceStats {
            segments: self.segments,
            bytes: self.bytes,
            hash: self.trace.value(),
        }
    }

    pub(super) fn set_latency(&mut self, a: &str, b: &str, latency: Latency) {
        self.latencies.insert(pair(a, b), latency);
    }

    /// One one-way delay from `from` to `to`, drawn from the network's rng.
    pub(super) fn sample(&mut self, from: &str, to: &str) -> Duration {
        let latency = self
            .latencies
            .get(&pair(from, to))
            .copied()
            .unwrap_or(self.default_latency);
        let lo = latency.min.min(latency.max);
        let hi = latency.min.max(latency.max);
        let span = u64::try_from((hi - lo).as_nanos()).unwrap_or(u64::MAX);
        lo + Duration::from_nanos(self.rng.random_range(0..=span))
    }

    pub(super) fn is_cut(&self, from: &str, to: &str) -> bool {
        let (from, to) = (host_of(from), host_of(to));
        self.black_holes.contains(from)
            || self.black_holes.contains(to)
            || self.partitions.contains(&pair(from, to))
    }

    pub(super) fn partition(&mut self, a: &str, b: &str, cut: bool) {
        if cut {
            self.partitions.insert(pair(a, b));
        } else {
            self.partitions.remove(&pair(a, b));
        }
    }

    pub(super) fn black_hole(&mut self, host: &str, cut: bool) {
        if cut {
            self.black_holes.insert(host_of(host).to_owned());
        } else {
            self.black_holes.remove(host_of(host));
        }
    }

    /// Brings every pipe in line with the faults now in force: on a cut path
    /// the segments not yet delivered are held (as TCP keeps retransmitting
    /// them); on an open one the held segments are rescheduled from now, in
    /// order. Held segments are always a queue's tail, so order is kept.
    pub(super) fn refresh_paths(&mut self, now: Instant, wakers: &mut Vec<Waker>) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            for side in 0..2 {
                self.refresh_pipe(id, side, now, wakers);
            }
        }
    }

    fn refresh_pipe(&mut self, id: u64, side: usize, now: Instant, wakers: &mut Vec<Waker>) {
        let Some(conn) = self.conns.get(&id) else { return };
        let (from, to) = (conn.hosts[side].clone(), conn.hosts[1 - side].clone());
        let cut = self.is_cut(&from, &to);
        let segments = &conn.pipes[side].segments;
        let changing = if cut {
            segments
                .iter()
                .filter(|s| s.at.is_some_and(|at| at > now))
                .count()
        } else {
            segments.iter().filter(|s| s.at.is_none()).count()
        };
        if changing == 0 {
            return;
        }
        let delays: Vec<Duration> = if cut {
            Vec::new()
        } else {
            (0..changing).map(|_| self.sample(&from, &to)).collect()
        };
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let pipe = &mut conn.pipes[side];
        let mut prev: Option<Instant> = None;
        let mut delays = delays.into_iter();
        for segment in &mut pipe.segments {
            match segment.at {
                Some(at) if cut && at > now => segment.at = None,
                None if !cut => {
                    let at = now + delays.next().unwrap_or_default();
                    segment.at = Some(prev.map_or(at, |p| p.max(at)));
                }
                _ => {}
            }
            prev = segment.at;
        }
        pipe.wake_reader(wakers);
        self.record(
            if cut { "hold" } else { "release" },
            now,
            &from,
            &to,
            changing as u64,
        );
    }

    /// Makes a connection between `client` and the address `server`.
    pub(super) fn open(&mut self, client: &str, server: &str) -> u64 {
        let id = self.next_id();
        let conn = Conn {
            hosts: [host_of(client).to_owned(), host_of(server).to_owned()],
            pipes: [Pipe::default(), Pipe::default()],
            reset: false,
            shut: [false; 2],
            dropped: [false; 2],
        };
        self.conns.insert(id, conn);
        id
    }

    /// Side `side` of connection `id` writes `data` (or, with `fin`, its FIN).
    pub(super) fn write(
        &mut self,
        id: u64,
        side: usize,
        data: &[u8],
        fin: bool,
        now: Instant,
        wakers: &mut Vec<Waker>,
    ) -> WriteOutcome {
        let Some(conn) = self.conns.get(&id) else {
            return WriteOutcome::Reset;
        };
        if conn.reset {
            return WriteOutcome::Reset;
        }
        if conn.shut[side] {
            return WriteOutcome::Shut;
        }
        if conn.dropped[1 - side] {
            // The peer closed in order and went away: nobody will read this.
            return WriteOutcome::Sent;
        }
        let (from, to) = (conn.hosts[side].clone(), conn.hosts[1 - side].clone());
        let prev = conn.pipes[side].segments.back().and_then(|s| s.at);
        let at = if self.is_cut(&from, &to) {
            None
        } else {
            let delay = self.sample(&from, &to);
            Some(prev.map_or(now + delay, |p| p.max(now + delay)))
        };
        self.segments += 1;
        self.bytes += data.len() as u64;
        let at_us = at.map_or(u64::MAX, |at| self.elapsed_us(at));
        self.record(
            if fin { "fin" } else { "send" },
            now,
            &from,
            &to,
            data.len() as u64,
        );
        self.trace.u64(at_us);
        let Some(conn) = self.conns.get_mut(&id) else {
            return WriteOutcome::Reset;
        };
        conn.shut[side] |= fin;
        let pipe = &mut conn.pipes[side];
        pipe.segments.push_back(Segment {
            at,
            data: data.to_vec(),
            read: 0,
            fin,
        });
        pipe.wake_reader(wakers);
        WriteOutcome::Sent
    }

    /// Side `side` of connection `id` reads what has been delivered into `buf`.
    pub(super) fn read(
        &mut self,
        id: u64,
        side: usize,
        buf: &mut [u8],
        now: Instant,
        waker: &Waker,
    ) -> ReadOutcome {
        let Some(conn) = self.conns.get_mut(&id) else {
            return ReadOutcome::Reset;
        };
        if conn.reset {
            return ReadOutcome::Reset;
        }
        let pipe = &mut conn.pipes[1 - side];
        let mut copied = 0;
        while copied < buf.len() {
            let Some(head) = pipe.segments.front_mut() else {
                break;
            };
            match head.at {
                Some(at) if at <= now => {}
                _ => break,
            }
            if head.fin {
                break;
            }
            let n = (head.data.len() - head.read).min(buf.len() - copied);
            buf[copied..copied + n].copy_from_slice(&head.data[head.read..head.read + n]);
            head.read += n;
            copied += n;
            if head.read == head.data.len() {
                pipe.segments.pop_front();
            }
        }
        if copied > 0 {
            return ReadOutcome::Data(copied);
        }
        match pipe.segments.front() {
            // The FIN stays queued: every later read sees EOF again.
            Some(head) if head.fin && head.at.is_some_and(|at| at <= now) => ReadOutcome::Eof,
            head => {
                pipe.reader = Some(waker.clone());
                ReadOutcome::Wait(head.and_then(|h| h.at))
            }
        }
    }

    /// Aborts connection `id`: both ends fail their next read and write with
    /// ConnectionReset, and everything not yet read is discarded.
    pub(super) fn reset(&mut self, id: u64, now: Instant, wakers: &mut Vec<Waker>) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.reset {
            return;
        }
        conn.reset = true;
        for pipe in &mut conn.pipes {
            pipe.discard(wakers);
        }
        let (a, b) = (conn.hosts[0].clone(), conn.hosts[1].clone());
        self.record("reset", now, &a, &b, id);
    }

    /// Resets every connection with `host` at either end.
    pub(super) fn reset_host(&mut self, host: &str, now: Instant, wakers: &mut Vec<Waker>) {
        let host = host_of(host);
        let ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.hosts.iter().any(|h| h == host))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.reset(id, now, wakers);
        }
    }

    /// Side `side` of connection `id` is dropped: a reset (SO_LINGER 0)
    /// unless it had shut down in order, in which case its FIN and the data
    /// before it still reach the peer.
    pub(super) fn drop_end(&mut self, id: u64, side: usize, now: Instant, wakers: &mut Vec<Waker>) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.dropped[side] = true;
        if conn.shut[side] && !conn.reset {
            conn.pipes[1 - side].discard(wakers);
        } else {
            self.reset(id, now, wakers);
        }
        if self.conns.get(&id).is_some_and(|c| c.dropped == [true; 2]) {
            self.conns.remove(&id);
        }
    }

    /// Removes the listener on `addr` if it is still listener `id` (any id
    /// with `None`), resetting the connections it had not accepted, as a
    /// closed socket's backlog is.
    pub(super) fn close_listener(
        &mut self,
        addr: &str,
        id: Option<u64>,
        now: Instant,
        wakers: &mut Vec<Waker>,
    ) {
        let Some(listener) = self.listeners.get(addr) else {
            return;
        };
        if id.is_some_and(|id| id != listener.id) {
            return;
        }
        let Some(mut listener) = self.listeners.remove(addr) else {
            return;
        };
        wakers.extend(listener.acceptor.take());
        for (conn, _) in listener.backlog {
            self.reset(conn, now, wakers);
            self.drop_end(conn, 1, now, wakers);
        }
        self.record("unlisten", now, addr, "", 0);
    }
}
