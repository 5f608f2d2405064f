//! The one validity rule: how long a round that a majority confirmed makes
//! keys ours.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// What a confirmed round (an acquisition, an extend, a renewal, an
/// idempotency claim) makes ours: keys set, or reset, with `ttl` by a round
/// that began at `start`, which the confirming nodes keep for `life` on our
/// clock (`ttl`, or less when one of their clocks runs fast: see
/// `Quorum::life`), less the drift allowance.
///
/// `start` is taken before the first request is sent, so the validity
/// covers the slowest node counted and all scheduling.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lease {
    pub(crate) start: Instant,
    pub(crate) ttl: Duration,
    pub(crate) life: Duration,
    pub(crate) drift: Duration,
}

impl Lease {
    /// `start + life - drift`: until when the keys are ours.
    pub(crate) fn valid_until(&self) -> Instant {
        self.start + self.life.saturating_sub(self.drift)
    }

    /// The validity left now, when it is at least `min`; otherwise
    /// [`Error::ValidityUsedUp`] with the time the round took.
    pub(crate) fn left(&self, min: Duration) -> Result<Duration> {
        let elapsed = self.start.elapsed();
        match validity(self.life, elapsed, self.drift) {
            Some(left) if left >= min => Ok(left),
            _ => Err(Error::ValidityUsedUp {
                elapsed,
                ttl: self.ttl,
                min,
            }),
        }
    }
}

/// `life - elapsed - drift`, or `None` when nothing is left.
fn validity(life: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    life.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_subtracts_elapsed_and_drift_and_never_goes_negative() {
        let ms = Duration::from_millis;
        assert_eq!(validity(ms(1000), ms(100), ms(12)), Some(ms(888)));
        assert_eq!(validity(ms(1000), ms(988), ms(12)), None);
        assert_eq!(validity(ms(1000), ms(2000), ms(12)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_used_up_below_the_minimum() {
        let ms = Duration::from_millis;
        let lease = Lease {
            start: Instant::now(),
            ttl: ms(1000),
            life: ms(500),
            drift: ms(12),
        };
        assert_eq!(lease.valid_until(), lease.start + ms(488));
        tokio::time::advance(ms(100)).await;
        assert_eq!(lease.left(ms(100)).unwrap(), ms(388));
        match lease.left(ms(400)) {
            Err(Error::ValidityUsedUp { elapsed, ttl, min }) => {
                assert_eq!((elapsed, ttl, min), (ms(100), ms(1000), ms(400)));
            }
            other => panic!("{other:?}"),
        }
    }
}
