//! What the clients did, on the simulator's global clock, and the safety
//! properties checked on it: mutual exclusion and fence order.
//!
//! A client works under a lock in steps, as a careful user does: a step
//! starts only while the guard says the lock is held for at least the step's
//! length (`Guard::is_held` and `Guard::remaining`), and the step's interval
//! is recorded. Two recorded steps of different holds of one resource that
//! overlap on the simulator's clock are two holders at once.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::outages::{FaultSpan, Outage};
use crate::violation::Violation;

/// One acquisition that succeeded.
#[derive(Clone, Debug)]
pub struct Hold {
    pub client: usize,
    pub resources: Vec<String>,
    pub token: String,
    pub fence: Option<u64>,
    /// When the client started asking for the lock.
    pub asked: Duration,
    /// When the lock was granted (`lock` returned).
    pub granted: Duration,
    /// When the holder gave it back (`release` returned, or the guard was
    /// dropped).
    pub given_back: Option<Duration>,
}

/// A step of work done under a hold: `[start, end)` on the simulator's clock.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub hold: usize,
    pub start: Duration,
    pub end: Duration,
}

/// Everything the clients did in one run.
#[derive(Default)]
pub struct History {
    start: Option<Instant>,
    pub holds: Vec<Hold>,
    pub steps: Vec<Step>,
    /// Operations that returned an error, by kind.
    pub errors: BTreeMap<String, u64>,
    /// Acquisitions that found the lock taken.
    pub refused: u64,
    /// Operations that reported the nodes unreachable.
    pub outages: Vec<Outage>,
    /// The faults injected.
    pub faults: Vec<FaultSpan>,
}

impl History {
    pub fn new(start: Instant) -> Self {
        History {
            start: Some(start),
            ..History::default()
        }
    }

    /// The simulator's clock: time since the run started.
    pub fn now(&self) -> Duration {
        self.start.map_or(Duration::ZERO, |start| start.elapsed())
    }

    /// `at` on the simulator's clock.
    pub fn since_start(&self, at: Instant) -> Duration {
        self.start
            .map_or(Duration::ZERO, |start| at.saturating_duration_since(start))
    }

    /// Records a granted hold; returns its index for its steps.
    pub fn hold(&mut self, hold: Hold) -> usize {
        self.holds.push(hold);
        self.holds.len() - 1
    }

    pub fn step(&mut self, hold: usize, start: Duration, end: Duration) {
        self.steps.push(Step { hold, start, end });
    }

    /// The holder of `hold` gave it back now.
    pub fn given_back(&mut self, hold: usize) {
        self.holds[hold].given_back = Some(self.now());
    }

    /// The hold whose token is `token`, if any.
    pub fn by_token(&self, token: &str) -> Option<&Hold> {
        self.holds.iter().rev().find(|h| h.token == token)
    }

    pub fn error(&mut self, kind: impl Into<String>) {
        *self.errors.entry(kind.into()).or_default() += 1;
    }

    /// A fault on `node` (for every client, or only `client`), described by
    /// `what` and drawn `drawn`th by the schedule, starts now;
    /// returns its index for [`History::fault_ended`].
    pub fn fault_started(
        &mut self,
        node: String,
        client: Option<usize>,
        (what, drawn): (String, Option<usize>),
    ) -> usize {
        let from = self.now();
        self.faults.push(FaultSpan {
            what,
            drawn,
            node,
            client,
            from,
            until: None,
        });
        self.faults.len() - 1
    }

    pub fn fault_ended(&mut self, fault: usize) {
        self.faults[fault].until = Some(self.now());
    }

    /// A hold named for a message.
    fn name(&self, hold: usize) -> String {
        let h = &self.holds[hold];
        let fence = h.fence.map(|f| format!(" fence {f}")).unwrap_or_default();
        format!(
            "client {} token {}{fence} (asked {:?}, granted {:?})",
            h.client,
            &h.token[..8.min(h.token.len())],
            h.asked,
            h.granted
        )
    }

    /// Every mutual-exclusion and fence-order violation. Fence order is
    /// required of two holds only where the second was asked for at least
    /// `fence_gap` after the first was granted (see `fence_order`).
    pub fn check(&self, fence_gap: Duration) -> Vec<Violation> {
        let mut found = self.overlaps();
        found.extend(self.fence_order(fence_gap));
        found
    }

    /// Steps of different holds on one resource that overlap.
    fn overlaps(&self) -> Vec<Violation> {
        let mut by_resource: BTreeMap<&str, Vec<&Step>> = BTreeMap::new();
        for step in &self.steps {
            for resource in &self.holds[step.hold].resources {
                by_resource.entry(resource).or_default().push(step);
            }
        }
        let mut found = Vec::new();
        for (resource, mut steps) in by_resource {
            // Each pair of holds once, however many of their steps overlap.
            let mut pairs = std::collections::BTreeSet::new();
            steps.sort_by_key(|s| (s.start, s.end));
            // The step reaching furthest so far: any later step that starts
            // before its end and belongs to another hold overlaps it.
            let mut reach: Option<&Step> = None;
            for step in steps {
                if let Some(prior) = reach
                    && step.start < prior.end
                    && step.hold != prior.hold
                    && pairs.insert((prior.hold.min(step.hold), prior.hold.max(step.hold)))
                {
                    found.push(Violation::Overlap {
                        resource: resource.to_owned(),
                        first: self.name(prior.hold),
                        second: self.name(step.hold),
                    });
                }
                if reach.is_none_or(|prior| step.end > prior.end) {
                    reach = Some(step);
                }
            }
        }
        found
    }

    /// Fenced holds of a resource: one granted before another was asked
    /// for must have the lower fence.
    ///
    /// After a node lost its fences (an empty restart), order rests on the
    /// nodes' clocks (docs/how-it-works.md, "Fencing tokens", (c)): it
    /// holds between acquisitions further apart than the nodes' clocks
    /// disagree, which is what `gap` says.
    fn fence_order(&self, gap: Duration) -> Vec<Violation> {
        let mut by_resource: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, hold) in self.holds.iter().enumerate() {
            if hold.fence.is_some() {
                for resource in &hold.resources {
                    by_resource.entry(resource).or_default().push(i);
                }
            }
        }
        let mut found = Vec::new();
        for (resource, holds) in by_resource {
            // The highest fence granted so far, walking the asks in time
            // order with the grants that came before each.
            let mut granted: Vec<usize> = holds.clone();
            granted.sort_by_key(|&i| self.holds[i].granted);
            let mut asked = holds;
            asked.sort_by_key(|&i| self.holds[i].asked);
            let mut highest: Option<usize> = None;
            let mut next = 0;
            for later in asked {
                while next < granted.len()
                    && self.holds[granted[next]].granted + gap < self.holds[later].asked
                {
                    let g = granted[next];
                    if highest.is_none_or(|h| self.holds[g].fence > self.holds[h].fence) {
                        highest = Some(g);
                    }
                    next += 1;
                }
                if let Some(earlier) = highest
                    && self.holds[earlier].fence >= self.holds[later].fence
                {
                    found.push(Violation::FenceOrder {
                        resource: resource.to_owned(),
                        earlier: self.name(earlier),
                        later: self.name(later),
                    });
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(history: &mut History, client: usize, fence: Option<u64>, asked: u64, granted: u64) -> usize {
        history.hold(Hold {
            client,
            resources: vec!["r".to_owned()],
            token: format!("token{client}"),
            fence,
            asked: Duration::from_millis(asked),
            granted: Duration::from_millis(granted),
            given_back: None,
        })
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn overlapping_steps_of_two_holds_are_found_and_touching_ones_are_not() {
        let mut history = History::default();
        let a = hold(&mut history, 0, None, 0, 1);
        let b = hold(&mut history, 1, None, 0, 10);
        history.step(a, ms(1), ms(5));
        history.step(a, ms(5), ms(10));
        history.step(b, ms(10), ms(12));
        assert!(history.check(Duration::ZERO).is_empty());
        // A long step of `a` covers two later short steps of `b`: one pair
        // of holds, found once.
        history.step(a, ms(11), ms(30));
        history.step(b, ms(20), ms(21));
        let found = history.check(Duration::ZERO);
        assert_eq!(found.len(), 1, "{found:?}");
        // A third hold inside `a`'s long step is another pair.
        let c = hold(&mut history, 2, None, 0, 22);
        history.step(c, ms(22), ms(23));
        let found = history.check(Duration::ZERO);
        assert_eq!(found.len(), 2, "{found:?}");
    }

    #[test]
    fn a_fence_not_above_one_granted_before_the_ask_is_found() {
        let mut history = History::default();
        hold(&mut history, 0, Some(5), 0, 1);
        hold(&mut history, 1, Some(7), 2, 3);
        assert!(history.check(Duration::ZERO).is_empty());
        // Asked before the first grant: concurrent, no order required.
        hold(&mut history, 2, Some(4), 0, 4);
        assert!(history.check(Duration::ZERO).is_empty());
        hold(&mut history, 3, Some(7), 5, 6);
        assert_eq!(history.check(Duration::ZERO).len(), 1);
    }
}
