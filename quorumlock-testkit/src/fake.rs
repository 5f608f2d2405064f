//! A fake node that speaks broken RESP: bad network input for the client.
//!
//! It listens on a free 127.0.0.1 port and reads requests like Redis does.
//! It answers the connection handshake (`CLIENT SETINFO`, `HELLO`, `SELECT`,
//! `PING`) correctly on most connections, so that the lock's own commands
//! (`SET`, `EVAL`, `EVALSHA`) reach the misbehaviour; on a random quarter of
//! the connections it misbehaves from the first reply on.
//!
//! Misbehaviours:
//! - [`Misbehaviour::Garbage`]: random bytes that are not RESP (the first
//!   byte is never a RESP type marker, so no garbage parses as a reply).
//! - [`Misbehaviour::CloseMidReply`]: the start of a well-formed reply, then
//!   the connection is closed (FIN or RST, at random).
//! - [`Misbehaviour::WrongType`]: a well-formed reply of a type Redis never
//!   sends to the lock's commands (an integer or a bulk string to `SET NX`,
//!   which answers `+OK` or nil): what a node answering out of step with its
//!   requests, or something else listening on the port, would send.
//! - [`Misbehaviour::Answer`]: always this exact reply to the lock's commands.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// What the fake node does instead of answering a lock command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Random bytes that are not RESP.
    Garbage,
    /// The start of a well-formed reply, then the connection closes.
    CloseMidReply,
    /// A well-formed reply of a type Redis never sends to the command.
    WrongType,
    /// Always this exact reply to the lock's commands.
    Answer(&'static [u8]),
}

/// Bytes that start no RESP2/RESP3 value.
const NOT_A_TYPE: &[u8] = b"@&?Q\x00\x7f\xfe\xff";

/// Well-formed beginnings of replies, cut short.
const TRUNCATED: &[&[u8]] = &[
    b"+O",
    b"+OK",
    b"$32\r\n0123abcd",
    b"*2\r\n:1\r\n",
    b":1",
    b"-ERR wro",
    b"*1\r\n$5\r\nhel",
];

/// Well-formed replies of the wrong type for `SET NX` (which answers `+OK`
/// or nil) and, but for `:1` and `:0`, for the scripts (which answer
/// integers, or an array of integers for renewal).
const WRONG_TYPE: &[&[u8]] = &[
    b":1\r\n",
    b":0\r\n",
    b"$1\r\n1\r\n",
    b"+1\r\n",
    b"$2\r\nno\r\n",
    b"+QUEUED\r\n",
    b"*0\r\n",
];

/// A running fake node; dropping it closes the port and every connection.
#[derive(Debug)]
pub struct FakeNode {
    port: u16,
    accept: JoinHandle<()>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicUsize,
    misbehaved: AtomicUsize,
}

impl FakeNode {
    /// Starts a fake node; `seed` drives its random choices. Must be called
    /// inside a tokio runtime.
    pub fn start(misbehaviour: Misbehaviour, seed: u64) -> FakeNode {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(TcpListener::from_std)
            .expect("fake node: bind 127.0.0.1:0 (inside a tokio runtime)");
        let port = listener.local_addr().expect("fake node address").port();
        let counters = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(listener, misbehaviour, seed, Arc::clone(&counters)));
        FakeNode {
            port,
            accept,
            counters,
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.counters.connections.load(Ordering::SeqCst)
    }

    /// Replies it broke so far.
    pub fn misbehaved(&self) -> usize {
        self.counters.misbehaved.load(Ordering::SeqCst)
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, misbehaviour: Misbehaviour, seed: u64, counters: Arc<Counters>) {
    // Dropping the set (when this task is aborted) aborts every connection.
    let mut connections = JoinSet::new();
    let mut rng = StdRng::seed_from_u64(seed);
    loop {
        tokio::select! {
            accepted = listener.accept() => if let Ok((stream, _)) = accepted {
                counters.connections.fetch_add(1, Ordering::SeqCst);
                let rng = StdRng::seed_from_u64(rng.random());
                connections.spawn(serve(stream, misbehaviour, rng, Arc::clone(&counters)));
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve(mut stream: TcpStream, misbehaviour: Misbehaviour, mut rng: StdRng, counters: Arc<Counters>) {
    let honest_handshake = rng.random_range(0..4) != 0;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some((command, used)) = parse_command(&buf) {
            buf.drain(..used);
            let name = command
                .first()
                .map(|c| c.to_ascii_uppercase())
                .unwrap_or_default();
            let handshake = matches!(name.as_slice(), b"CLIENT" | b"HELLO" | b"SELECT" | b"PING");
            if handshake && honest_handshake {
                let reply: &[u8] = if name == b"PING" { b"+PONG\r\n" } else { b"+OK\r\n" };
                if stream.write_all(reply).await.is_err() {
                    return;
                }
                continue;
            }
            counters.misbehaved.fetch_add(1, Ordering::SeqCst);
            match misbehaviour {
                Misbehaviour::Garbage => {
                    let len = rng.random_range(1..64);
                    let mut garbage: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                    garbage[0] = NOT_A_TYPE[rng.random_range(0..NOT_A_TYPE.len())];
                    if stream.write_all(&garbage).await.is_err() {
                        return;
                    }
                }
                Misbehaviour::WrongType | Misbehaviour::Answer(_) => {
                    let reply = match misbehaviour {
                        Misbehaviour::Answer(reply) => reply,
                        _ => WRONG_TYPE[rng.random_range(0..WRONG_TYPE.len())],
                    };
                    if stream.write_all(reply).await.is_err() {
                        return;
                    }
                }
                Misbehaviour::CloseMidReply => {
                    let start = TRUNCATED[rng.random_range(0..TRUNCATED.len())];
                    let _ = stream.write_all(start).await;
                    if rng.random_bool(0.5) {
                        let _ = stream.shutdown().await;
                    } else {
                        let _ = stream.set_zero_linger();
                    }
                    return;
                }
            }
        }
    }
}

/// One complete RESP request (an array of bulk strings) at the start of
/// `buf`: its parts and the bytes it used. `None` while incomplete.
fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let (count, mut at) = parse_line(buf, 0, b'*')?;
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = parse_line(buf, at, b'$')?;
        let end = start + len;
        if buf.len() < end + 2 {
            return None;
        }
        parts.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Some((parts, at))
}

/// `<marker><number>\r\n` at `at`: the number and the offset after the line.
fn parse_line(buf: &[u8], at: usize, marker: u8) -> Option<(usize, usize)> {
    if *buf.get(at)? != marker {
        // Not a request a Redis client would send: treat it as never complete.
        return None;
    }
    let end = at + buf[at..].windows(2).position(|w| w == b"\r\n")?;
    let number = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
    Some((number, end + 2))
}
