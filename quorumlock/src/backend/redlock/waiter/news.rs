//! A count of events that many waiters watch, each learning whether it moved
//! since it last looked: tokio's `watch` channel without its random choice
//! among eight wake lists, so that waiters wake in the order they began to
//! wait, and a simulated run replays from its seed (the `sim` feature).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// The count.
#[derive(Debug, Default)]
pub(crate) struct Count {
    value: AtomicU64,
    moved: Notify,
}

impl Count {
    /// Counts one event and wakes every watcher.
    pub(crate) fn bump(&self) {
        self.value.fetch_add(1, Ordering::AcqRel);
        self.moved.notify_waiters();
    }

    /// A watcher for which the events so far are old news.
    pub(crate) fn watch(self: &Arc<Self>) -> Watcher {
        Watcher {
            seen: self.value.load(Ordering::Acquire),
            count: Arc::clone(self),
        }
    }
}

/// One waiter's view of a [`Count`].
#[derive(Debug)]
pub(crate) struct Watcher {
    count: Arc<Count>,
    seen: u64,
}

impl Watcher {
    /// Completes once the count moved since this watcher last saw it.
    /// Cancel safe: an event while nobody waits is seen by the next call.
    pub(crate) async fn changed(&mut self) {
        loop {
            let moved = self.count.moved.notified();
            tokio::pin!(moved);
            // Registered before the count is read: a bump after the read
            // wakes this wait.
            moved.as_mut().enable();
            let now = self.count.value.load(Ordering::Acquire);
            if now != self.seen {
                self.seen = now;
                return;
            }
            moved.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_watcher_sees_each_bump_once_and_a_bump_while_it_was_not_waiting() {
        let count = Arc::new(Count::default());
        count.bump();
        let mut watcher = count.watch();
        assert!(
            futures::poll!(Box::pin(watcher.changed())).is_pending(),
            "old news"
        );
        count.bump();
        watcher.changed().await;
        assert!(
            futures::poll!(Box::pin(watcher.changed())).is_pending(),
            "seen once"
        );
        let mut waiting = Box::pin(watcher.changed());
        assert!(futures::poll!(waiting.as_mut()).is_pending());
        count.bump();
        waiting.await;
    }
}
