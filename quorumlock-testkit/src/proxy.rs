//! A fault-injecting TCP proxy in front of one node: latency, black hole,
//! refusal and connection resets, switchable while a test runs.
//!
//! Why a proxy: `tc netem` is not available on these kernels, and network
//! namespaces with nft rules need root. An in-process tokio proxy needs
//! neither, affects only the connections that go through it (the test can
//! still talk to the node directly, e.g. with `RedisServer::command`), and
//! every switch takes effect synchronously: the state is a `watch` channel
//! that each connection consults for every chunk it reads and before every
//! chunk it writes, so after `proxy.black_hole()` returns no byte read
//! later is forwarded. Idle connections also watch the channel, so a reset
//! reaches them without traffic.
//!
//! Faults, as a client of the proxy sees them:
//! - latency: every chunk is forwarded `latency` after the proxy read it, in
//!   each direction (a round trip gains twice the latency). Chunks keep their
//!   order and are pipelined: a queue per direction, no head-of-line wait.
//! - black hole: connects succeed (the kernel completes the handshake),
//!   requests are read and dropped, nothing is answered; existing
//!   connections go silent too. Bytes dropped stay dropped after `heal`, so
//!   a pipelined client on an old connection may be out of step: use new
//!   connections after a heal.
//! - refuse: new connections are accepted and closed at once with a reset;
//!   existing ones are reset. (A listener that stays bound cannot refuse the
//!   TCP handshake itself; closing the listener would risk losing the port.)
//! - reset: cut every current connection with an RST (`SO_LINGER` 0), new
//!   ones work normally.
//! - black hole for existing connections only: the connections accepted so
//!   far go silent as in a black hole (no reset, no FIN), new ones work
//!   normally: a half-open flow behind a firewall that dropped its state,
//!   while the path to the node is fine.
//!
//! Connections run in a `JoinSet` owned by the accept task, which the proxy
//! aborts when dropped; dropping the proxy also marks every connection as
//! cut, so none forwards another byte, and the port is closed.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// What the proxy does to traffic besides latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// Read and drop everything, answer nothing.
    BlackHole,
    /// Close new connections at once; cut existing ones.
    Refuse,
}

#[derive(Clone, Copy, Debug)]
struct State {
    latency: Duration,
    fault: Fault,
    /// Bumped by `reset`: connections accepted before are cut.
    epoch: u64,
    /// Connections numbered below this (in accept order) are black-holed
    /// whatever `fault` says (see [`Proxy::black_hole_existing`]).
    holed_below: u64,
    /// The proxy was dropped.
    closed: bool,
}

impl State {
    /// Whether a connection accepted in `epoch` must be cut now.
    fn cuts(&self, epoch: u64) -> bool {
        self.closed || self.fault == Fault::Refuse || self.epoch != epoch
    }

    /// Whether connection number `seq` swallows its traffic now.
    fn swallows(&self, seq: u64) -> bool {
        self.fault == Fault::BlackHole || seq < self.holed_below
    }
}

/// Where a connection's traffic goes: its accept epoch (for cuts) and its
/// number in accept order (for [`Proxy::black_hole_existing`]).
#[derive(Clone, Copy, Debug)]
struct Id {
    epoch: u64,
    seq: u64,
}

/// A proxy on a free 127.0.0.1 port forwarding to `127.0.0.1:target`.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    target: u16,
    state: watch::Sender<State>,
    accept: JoinHandle<()>,
    /// Connections accepted so far (the next one's number).
    accepted: Arc<AtomicU64>,
}

impl Proxy {
    /// Starts a proxy in front of `127.0.0.1:target_port`, forwarding
    /// normally. Must be called inside a tokio runtime (any flavour); the
    /// proxy's tasks run on it.
    pub fn start(target_port: u16) -> Proxy {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(TcpListener::from_std)
            .expect("proxy: bind 127.0.0.1:0 (inside a tokio runtime)");
        let port = listener.local_addr().expect("proxy address").port();
        let (state, rx) = watch::channel(State {
            latency: Duration::ZERO,
            fault: Fault::None,
            epoch: 0,
            holed_below: 0,
            closed: false,
        });
        let accepted = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(listener, target_port, rx, Arc::clone(&accepted)));
        Proxy {
            port,
            target: target_port,
            state,
            accept,
            accepted,
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port of the node behind the proxy.
    pub fn target_port(&self) -> u16 {
        self.target
    }

    /// Delays every chunk by `latency` in each direction, from now on
    /// (chunks already queued keep their delay).
    pub fn set_latency(&self, latency: Duration) {
        self.state.send_modify(|s| s.latency = latency);
    }

    /// Swallows all traffic of new and existing connections.
    pub fn black_hole(&self) {
        self.state.send_modify(|s| s.fault = Fault::BlackHole);
    }

    /// Swallows all traffic of the connections accepted so far (they go
    /// silent: nothing is answered, nothing is closed), while new ones are
    /// served normally. `heal` lifts it.
    pub fn black_hole_existing(&self) {
        let below = self.accepted.load(Ordering::SeqCst);
        self.state.send_modify(|s| s.holed_below = below);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Closes new connections at once and cuts existing ones.
    pub fn refuse(&self) {
        self.state.send_modify(|s| s.fault = Fault::Refuse);
    }

    /// Cuts every current connection with an RST; new ones are served.
    pub fn reset(&self) {
        self.state.send_modify(|s| s.epoch += 1);
    }

    /// Back to normal: no fault, no latency.
    pub fn heal(&self) {
        self.state.send_modify(|s| {
            s.fault = Fault::None;
            s.latency = Duration::ZERO;
            s.holed_below = 0;
        });
    }

    /// Back to normal and, in the same switch, cuts every current
    /// connection: the end of a partition after TCP gave up on the old
    /// connections. Use it after a black hole, whose swallowed bytes would
    /// leave an old connection's replies out of step with its requests (a
    /// real network delays or loses whole connections, never a few bytes in
    /// the middle of one).
    pub fn heal_and_reset(&self) {
        self.state.send_modify(|s| {
            s.fault = Fault::None;
            s.latency = Duration::ZERO;
            s.holed_below = 0;
            s.epoch += 1;
        });
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.state.borrow().fault
    }

    /// The current latency per direction.
    pub fn latency(&self) -> Duration {
        self.state.borrow().latency
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.send_modify(|s| s.closed = true);
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: u16,
    mut state: watch::Receiver<State>,
    next_seq: Arc<AtomicU64>,
) {
    // Dropping the set (when this task is aborted) aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let now = *state.borrow();
                    let seq = next_seq.fetch_add(1, Ordering::SeqCst);
                    if now.fault == Fault::Refuse || now.closed {
                        abort(client);
                    } else {
                        let id = Id { epoch: now.epoch, seq };
                        connections.spawn(serve(client, target, state.clone(), id));
                    }
                }
                // Out of file descriptors or similar: do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            changed = state.changed() => if changed.is_err() || state.borrow().closed {
                return;
            },
        }
    }
}

/// Closes `stream` with an RST instead of a FIN.
fn abort(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// One client connection: swallow while black-holed, then connect to the
/// node and relay both directions until both end or the connection is cut.
async fn serve(mut client: TcpStream, target: u16, mut state: watch::Receiver<State>, id: Id) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let now = *state.borrow_and_update();
        if now.cuts(id.epoch) {
            return abort(client);
        }
        if !now.swallows(id.seq) {
            break;
        }
        tokio::select! {
            read = client.read(&mut buf) => if matches!(read, Ok(0) | Err(_)) {
                return;
            },
            _ = state.changed() => {}
        }
    }
    // The node is down: the client sees a reset, as close to a refused
    // connection as a proxy can get.
    let Ok(mut node) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)).await else {
        return abort(client);
    };
    let _ = client.set_nodelay(true);
    let _ = node.set_nodelay(true);
    let cut = {
        let (client_read, client_write) = client.split();
        let (node_read, node_write) = node.split();
        let up = pump(client_read, node_write, state.clone(), id);
        let down = pump(node_read, client_write, state.clone(), id);
        let cut_signal = until_cut(state, id.epoch);
        tokio::pin!(up, down, cut_signal);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                cut = &mut up, if !up_done => if cut { break true } else { up_done = true },
                cut = &mut down, if !down_done => if cut { break true } else { down_done = true },
                () = &mut cut_signal => break true,
            }
            if up_done && down_done {
                break false;
            }
        }
    };
    if cut {
        abort(client);
        abort(node);
    }
}

/// Resolves when a connection accepted in `epoch` must be cut.
async fn until_cut(mut state: watch::Receiver<State>, epoch: u64) {
    loop {
        if state.borrow_and_update().cuts(epoch) {
            return;
        }
        if state.changed().await.is_err() {
            return; // the proxy is gone
        }
    }
}

/// Copies `from` to `to` through a queue that delays each chunk by the
/// latency in force when it was read. Returns whether the connection must
/// be cut (otherwise `from` ended or `to` failed; `to` is shut down after
/// the queue drained).
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, state: watch::Receiver<State>, id: Id) -> bool {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read_state = state.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            let now = *read_state.borrow();
            if now.cuts(id.epoch) {
                return true;
            }
            if now.swallows(id.seq) {
                continue;
            }
            if queue
                .send((Instant::now() + now.latency, buf[..n].to_vec()))
                .is_err()
            {
                return false;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = queued.recv().await {
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            let now = *state.borrow();
            if now.cuts(id.epoch) {
                return true;
            }
            if now.swallows(id.seq) {
                continue;
            }
            if to.write_all(&chunk).await.is_err() {
                return false;
            }
        }
        let _ = to.shutdown().await;
        false
    };
    tokio::pin!(writer);
    tokio::select! {
        cut = reader => if cut { true } else { writer.await },
        cut = &mut writer => cut,
    }
}
