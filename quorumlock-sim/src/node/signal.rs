//! A value a node's connections watch (its crash count, whether it is
//! paused): tokio's `watch` channel without its random choice among eight
//! wake lists, which would wake the connections in a different order on
//! each run, and a run must replay from its seed.

use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

/// A watched value.
#[derive(Debug, Default)]
pub(crate) struct Watched<T> {
    value: Mutex<T>,
    changed: Notify,
}

impl<T: Copy + PartialEq> Watched<T> {
    pub(crate) fn new(value: T) -> Self {
        Watched {
            value: Mutex::new(value),
            changed: Notify::new(),
        }
    }

    pub(crate) fn get(&self) -> T {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the value and wakes every watcher, in the order they began
    /// to wait.
    pub(crate) fn update(&self, change: impl FnOnce(&mut T)) {
        change(&mut self.value.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.notify_waiters();
    }

    /// Completes with the value once it differs from `seen`. Cancel safe.
    pub(crate) async fn changed_from(&self, seen: T) -> T {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the value is read: an update after the read
            // wakes this wait.
            notified.as_mut().enable();
            let now = self.get();
            if now != seen {
                return now;
            }
            notified.await;
        }
    }
}
