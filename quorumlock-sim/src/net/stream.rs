//! One end of a simulated connection, as Tokio's byte-stream traits.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::{fmt, io};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep, sleep_until};

use super::Network;
use super::state::{ReadOutcome, WriteOutcome};

/// One end of a simulated TCP connection.
///
/// Dropping it resets the connection (a close with SO_LINGER 0);
/// `poll_shutdown` sends an orderly FIN instead. See the module
/// documentation for the model.
pub struct SimStream {
    net: Network,
    conn: u64,
    /// 0 for the connecting end, 1 for the accepted end.
    side: usize,
    local: String,
    peer: String,
    /// Wakes the reader when the segment at the head of its queue is due:
    /// made at the first wait (making one needs the runtime) and reused.
    due: Option<Pin<Box<Sleep>>>,
}

impl SimStream {
    pub(super) fn new(net: Network, conn: u64, side: usize, local: &str, peer: &str) -> SimStream {
        SimStream {
            net,
            conn,
            side,
            local: local.to_owned(),
            peer: peer.to_owned(),
            due: None,
        }
    }

    /// This end's name: the connecting host (`"c0"`) or the listening
    /// address (`"n0:6379"`).
    pub fn local(&self) -> &str {
        &self.local
    }

    /// The other end's name, in the same form as [`SimStream::local`].
    pub fn peer(&self) -> &str {
        &self.peer
    }

    fn write_segment(&self, data: &[u8], fin: bool) -> io::Result<()> {
        let outcome = self
            .net
            .with_state(|state, wakers| state.write(self.conn, self.side, data, fin, Instant::now(), wakers));
        match outcome {
            WriteOutcome::Sent => Ok(()),
            WriteOutcome::Reset => Err(io::ErrorKind::ConnectionReset.into()),
            WriteOutcome::Shut => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let outcome = this.net.with_state(|state, _| {
                state.read(
                    this.conn,
                    this.side,
                    buf.initialize_unfilled(),
                    Instant::now(),
                    cx.waker(),
                )
            });
            let due = match outcome {
                ReadOutcome::Data(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                ReadOutcome::Eof => return Poll::Ready(Ok(())),
                ReadOutcome::Reset => return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
                ReadOutcome::Wait(None) => return Poll::Pending,
                ReadOutcome::Wait(Some(due)) => due,
            };
            // The state holds this task's waker for new data, resets and
            // heals; the timer covers the head segment coming due.
            let sleep = match &mut this.due {
                Some(sleep) => {
                    sleep.as_mut().reset(due);
                    sleep
                }
                slot @ None => slot.insert(Box::pin(sleep_until(due))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // Due already (the clock moved on): read again.
        }
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        Poll::Ready(self.write_segment(data, false).map(|()| data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A second shutdown is a no-op, as shutdown(2) on a shut socket.
        match self.write_segment(&[], true) {
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Poll::Ready(Ok(())),
            result => Poll::Ready(result),
        }
    }
}

impl fmt::Debug for SimStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimStream")
            .field("conn", &self.conn)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        let (conn, side) = (self.conn, self.side);
        self.net
            .with_state(|state, wakers| state.drop_end(conn, side, Instant::now(), wakers));
    }
}
