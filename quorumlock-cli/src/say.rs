//! quorumlock's own messages on stderr, written by a thread of their own.
//!
//! A write to stderr can block for as long as nobody reads it: a pipe to a
//! log shipper that stalled, a terminal whose output was stopped (Ctrl-S).
//! Written from the runtime thread, such a write would stop the renewals of
//! the lock while the command runs, or hold quorumlock between taking the
//! lock and starting the command until the validity is gone. So the runtime
//! never writes: [`say!`](crate::say!) queues the message, and a writer
//! thread writes it. A message that finds the queue full is dropped and
//! counted; the count is written before the next message that gets through
//! (once stderr drains), so that a reader knows something is missing.
//!
//! [`flush`] waits, bounded, for the queue to be written: the last message
//! before exit (why quorumlock failed) is the one that matters most, and an
//! exit must not hang on a stderr that never drains.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Messages that may wait for the writer. quorumlock says a handful of
/// lines per run; a queue this deep is never full unless stderr has stopped
/// draining, and then it bounds the memory held for it.
const QUEUE_LEN: usize = 64;

/// How long [`flush`] waits at exit for the queue to be written: far longer
/// than writing a few lines takes, short enough that a stderr nobody reads
/// delays the exit (and the exit status a supervisor waits for) only a
/// little.
pub(crate) const FLUSH_LIMIT: Duration = Duration::from_millis(500);

/// Writes a line on stderr without ever blocking the caller; the arguments
/// are those of `eprintln!`.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::line(format_args!($($arg)*))
    };
}

enum Out {
    Text(String),
    /// Answered once everything queued before it was written.
    Flush(SyncSender<()>),
}

struct Writer {
    queue: SyncSender<Out>,
    dropped: Arc<AtomicU64>,
}

/// The writer, started on first use; `None` when no thread could be started.
fn writer() -> Option<&'static Writer> {
    static WRITER: OnceLock<Option<Writer>> = OnceLock::new();
    WRITER
        .get_or_init(|| {
            let (queue, messages) = sync_channel(QUEUE_LEN);
            let dropped = Arc::new(AtomicU64::new(0));
            let counter = Arc::clone(&dropped);
            std::thread::Builder::new()
                .name("quorumlock-stderr".to_owned())
                .spawn(move || write_all(&messages, &counter))
                .ok()
                .map(|_| Writer { queue, dropped })
        })
        .as_ref()
}

/// Queues `args` and a newline for stderr (see [`say!`](crate::say!)).
pub(crate) fn line(args: fmt::Arguments<'_>) {
    let mut text = args.to_string();
    text.push('\n');
    self::text(text);
}

/// Queues `text` for stderr as it is (a prompt without a newline).
pub(crate) fn text(text: String) {
    let Some(writer) = writer() else {
        // No thread: a write that may block beats a message lost.
        let _ = io::stderr().write_all(text.as_bytes());
        return;
    };
    if let Err(TrySendError::Full(_)) = writer.queue.try_send(Out::Text(text)) {
        writer.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits until every message queued so far is written, at most `limit`;
/// `false` when stderr did not take them in time.
pub(crate) fn flush(limit: Duration) -> bool {
    let Some(writer) = writer() else {
        return true;
    };
    let (done, written) = sync_channel(1);
    if writer.queue.try_send(Out::Flush(done)).is_err() {
        return false;
    }
    written.recv_timeout(limit).is_ok()
}

/// The writer thread: writes each message in order until the process ends.
fn write_all(messages: &Receiver<Out>, dropped: &AtomicU64) {
    let mut stderr = io::stderr();
    for message in messages {
        let lost = dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            // Errors are ignored: there is nowhere else to report them.
            let _ = writeln!(
                stderr,
                "quorumlock: {lost} message(s) dropped here: stderr was not being read"
            );
        }
        match message {
            Out::Text(text) => {
                let _ = stderr.write_all(text.as_bytes());
            }
            Out::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}
