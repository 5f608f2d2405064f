//! The wall clock: the time since the unix epoch, which the library sends to
//! the nodes where it must be compared with theirs (a fenced acquire's
//! proposal, a hand-off queue's deadlines). One home, so that a simulation
//! can run it on simulated time (the `sim` feature). Lock validity never
//! uses it: that is measured on the monotonic clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time since the unix epoch (zero for a clock set before it).
pub(crate) fn since_epoch() -> Duration {
    #[cfg(feature = "sim")]
    if let Some(simulated) = crate::sim::since_epoch() {
        return simulated;
    }
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// [`since_epoch`] in whole milliseconds.
pub(crate) fn unix_ms() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// [`since_epoch`] in whole microseconds.
pub(crate) fn unix_us() -> u64 {
    u64::try_from(since_epoch().as_micros()).unwrap_or(u64::MAX)
}
