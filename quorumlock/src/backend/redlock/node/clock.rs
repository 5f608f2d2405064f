//! How fast a node's clock runs against ours, from its `TIME` readings.
//!
//! Redis expires a key by its own wall clock: a node whose clock runs at
//! rate `r` (seconds of its clock per second of ours) forgets a key set for
//! `ttl` after `ttl / r` of real time. The lock layer shortens a lock's
//! validity by the rates of the nodes that granted it (see
//! `Quorum::life`); this module measures them.
//!
//! **Estimator.** Each sample is a node's `TIME` (microseconds) read in a
//! round trip that was made anyway, stamped with the midpoint of that round
//! trip on our monotonic clock. The node read its clock somewhere inside
//! the round trip, so the stamp is off by at most half of it. Between two
//! samples `a` and `b` the node's clock advanced `Δnode` while ours
//! advanced `Δours`, known to within `h_a + h_b` (the half round trips),
//! so the node's rate is at most `(Δnode + 2 µs) / (Δours - h_a - h_b)`
//! (the 2 µs: `TIME`'s resolution). The estimate is the largest such upper
//! bound between the newest sample and each older one it keeps: the
//! newest pair sees a change of rate at the first sample after it, the
//! older pairs keep a long, precise baseline. Pairs whose bound is looser
//! than [`RATE_MAX_ERROR`] are not used, so that the noise of a slow round
//! trip never makes a normal node look fast.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{RATE_MAX_ERROR, RATE_READ_EVERY, RATE_SAMPLES, RATE_WINDOW};

/// `TIME`'s resolution, once for each reading of a pair, in microseconds.
const TIME_RESOLUTION_US: f64 = 2.0;

/// One reading of a node's clock.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// The midpoint of the round trip that carried it, on our clock.
    at: Instant,
    /// Half that round trip: how far the node's reading may be from `at`.
    half_rtt: Duration,
    /// The node's clock, microseconds since the epoch.
    node_us: u64,
}

/// The recent readings of one node's clock, and the estimate they give.
#[derive(Debug)]
pub(crate) struct ClockRate {
    samples: Mutex<VecDeque<Sample>>,
    /// What [`ClockRate::claim_reading`] measures time from.
    base: Instant,
    /// When the next reading is due, in milliseconds since `base`.
    next_reading_ms: AtomicU64,
    /// [`ClockRate::fastest`] as of the last reading that bounded it (`f64`
    /// bits; 0.0 while unknown), so that reading the estimate on every
    /// acquisition costs an atomic load, not a pass over the samples.
    estimate: AtomicU64,
}

impl Default for ClockRate {
    fn default() -> Self {
        ClockRate {
            samples: Mutex::default(),
            base: Instant::now(),
            next_reading_ms: AtomicU64::new(0),
            estimate: AtomicU64::new(0),
        }
    }
}

impl ClockRate {
    /// Whether a reading is due ([`RATE_READ_EVERY`] after the last one);
    /// `true` for one caller only, who then takes it.
    pub(crate) fn claim_reading(&self) -> bool {
        let now = self.millis(Instant::now());
        let due = self.next_reading_ms.load(Ordering::Relaxed);
        now >= due
            && self
                .next_reading_ms
                .compare_exchange(due, now + self.every_ms(), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn every_ms(&self) -> u64 {
        u64::try_from(RATE_READ_EVERY.as_millis()).unwrap_or(u64::MAX)
    }

    /// Records a reading `node_us` of the node's clock, made by a round trip
    /// sent at `sent` whose reply came at `received`.
    pub(crate) fn record(&self, sent: Instant, received: Instant, node_us: u64) {
        let half_rtt = received.saturating_duration_since(sent) / 2;
        let sample = Sample {
            at: sent + half_rtt,
            half_rtt,
            node_us,
        };
        // A reading from a renewal round makes the next one due later.
        self.next_reading_ms
            .fetch_max(self.millis(received) + self.every_ms(), Ordering::Relaxed);
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back(sample);
        while samples.len() > RATE_SAMPLES
            || samples
                .front()
                .is_some_and(|first| sample.at.saturating_duration_since(first.at) > RATE_WINDOW)
        {
            samples.pop_front();
        }
        let fastest = samples
            .iter()
            .filter_map(|older| upper_bound(older, &sample))
            .reduce(f64::max);
        // Readings too loose to bound the rate (a loaded machine, a slow
        // round trip) leave the last bound in place: a known rate, even a
        // little old, is worth more than none.
        if let Some(fastest) = fastest {
            self.estimate.store(fastest.to_bits(), Ordering::Relaxed);
        }
    }

    /// Forgets every reading: the server behind the node changed (a
    /// failover), and its clock is another one.
    pub(crate) fn forget(&self) {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.estimate.store(0, Ordering::Relaxed);
    }

    /// The highest rate the node's clock can be running at, by its
    /// readings; `None` while no pair of them bounds it tightly enough (or
    /// the clock stood still or went back).
    pub(crate) fn fastest(&self) -> Option<f64> {
        let estimate = f64::from_bits(self.estimate.load(Ordering::Relaxed));
        (estimate > 0.0).then_some(estimate)
    }
}

/// The largest rate consistent with readings `a` and `b` (`b` later), when
/// its error bound is within [`RATE_MAX_ERROR`].
fn upper_bound(a: &Sample, b: &Sample) -> Option<f64> {
    let ours = b.at.saturating_duration_since(a.at).as_secs_f64() * 1e6;
    let slack = (a.half_rtt + b.half_rtt).as_secs_f64() * 1e6;
    let least_ours = ours - slack;
    if least_ours <= 0.0 || slack / least_ours > RATE_MAX_ERROR {
        return None;
    }
    // Signed: a clock stepped back between the readings gives a negative
    // rate, which no bound takes as fast.
    let node = b.node_us as f64 - a.node_us as f64;
    Some((node + TIME_RESOLUTION_US) / least_ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings every `step` of a clock running at `rate`, round trips of `rtt`.
    fn clock(rate: f64, step: Duration, rtt: Duration, count: u32) -> ClockRate {
        let clock = ClockRate::default();
        let start = Instant::now();
        for i in 0..count {
            let sent = start + step * i;
            let node_us = 1_700_000_000_000_000 + ((step * i + rtt / 2).as_secs_f64() * 1e6 * rate) as u64;
            clock.record(sent, sent + rtt, node_us);
        }
        clock
    }

    #[test]
    fn the_bound_covers_the_true_rate_within_the_error_allowed() {
        let (step, rtt) = (Duration::from_millis(500), Duration::from_micros(200));
        for rate in [0.5, 1.0, 1.005, 1.5, 3.0] {
            let fastest = clock(rate, step, rtt, 6).fastest().expect("bounded");
            assert!(
                fastest >= rate && fastest <= rate * (1.0 + RATE_MAX_ERROR),
                "rate {rate}: {fastest}"
            );
        }
    }

    #[test]
    fn loose_readings_keep_the_last_bound() {
        let clock = clock(1.5, Duration::from_millis(500), Duration::from_micros(200), 4);
        let known = clock.fastest().expect("bounded");
        let last = *clock.samples.lock().unwrap().back().unwrap();
        // A reading 20 ms later with a 10 ms round trip bounds nothing new.
        let sent = last.at + Duration::from_millis(20);
        clock.record(sent, sent + Duration::from_millis(10), last.node_us + 30_000);
        assert_eq!(clock.fastest(), Some(known));
    }

    #[test]
    fn one_reading_or_loose_round_trips_bound_nothing() {
        assert_eq!(
            clock(1.5, Duration::from_millis(500), Duration::ZERO, 1).fastest(),
            None
        );
        // 10 ms round trips 20 ms apart: far too loose.
        let loose = clock(1.5, Duration::from_millis(20), Duration::from_millis(10), 5);
        assert_eq!(loose.fastest(), None);
    }

    #[test]
    fn a_clock_that_turns_fast_is_seen_at_the_next_reading() {
        let clock = clock(1.0, Duration::from_secs(1), Duration::from_micros(200), 5);
        let last = *clock.samples.lock().unwrap().back().unwrap();
        // From now on at twice the speed, for one more reading a second later.
        let sent = last.at - last.half_rtt + Duration::from_secs(1);
        clock.record(sent, sent + Duration::from_micros(200), last.node_us + 2_000_000);
        assert!(clock.fastest().unwrap() >= 1.99, "{:?}", clock.fastest());
    }

    #[test]
    fn a_clock_stepped_back_is_not_fast_and_old_readings_age_out() {
        let clock = clock(1.0, Duration::from_secs(20), Duration::from_micros(200), 10);
        let kept = clock.samples.lock().unwrap().len();
        assert!(kept <= RATE_SAMPLES && kept as u32 <= 1 + (RATE_WINDOW.as_secs() / 20) as u32);
        let last = *clock.samples.lock().unwrap().back().unwrap();
        let sent = last.at - last.half_rtt + Duration::from_secs(1);
        clock.record(sent, sent, last.node_us - 5_000_000);
        assert!(clock.fastest().is_none_or(|rate| rate < 1.0));
    }
}
