//! The one validity rule: how long a round that a majority confirmed makes
//! keys ours.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::MAX_TTL;
use crate::error::{Error, Result, Setting};

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

/// The clock drift allowance for a ttl: `ttl * factor + fixed`.
///
/// Stores expire keys, leases and sessions by their own clocks, which may
/// run faster than ours; the reference Redlock implementation allows 1 % of
/// the ttl plus 2 ms for the granularity of Redis expiry (the defaults in
/// `config`).
pub(crate) fn drift(ttl: Duration, factor: f64, fixed: Duration) -> Duration {
    ttl.mul_f64(factor).saturating_add(fixed)
}

/// How a store keeps a ttl: in whole `unit`s, cut down (Redis stores whole
/// milliseconds: the validity is then computed from the ttl the nodes
/// really apply) or rounded up (an etcd lease counts whole seconds: the
/// lock lasts at least as long as asked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TtlUnit {
    pub(crate) unit: Duration,
    pub(crate) round_up: bool,
}

impl TtlUnit {
    /// Whole milliseconds, cut down.
    pub(crate) const MILLIS: TtlUnit = TtlUnit {
        unit: Duration::from_millis(1),
        round_up: false,
    };

    /// `requested` in whole units; `None` when it is zero or above
    /// [`MAX_TTL`] in them.
    fn apply(self, requested: Duration) -> Option<Duration> {
        let unit = self.unit.as_nanos();
        let units = requested.as_nanos() / unit
            + u128::from(self.round_up && !requested.as_nanos().is_multiple_of(unit));
        let ttl = u64::try_from(units * unit).ok().map(Duration::from_nanos)?;
        (!ttl.is_zero() && ttl <= MAX_TTL).then_some(ttl)
    }
}

/// The one ttl rule, on every store: a ttl above zero and at most
/// [`MAX_TTL`], in the store's `unit`, that leaves validity after one
/// request's timeout (`round`), the `drift` allowance for it and
/// `min_validity`. Returns the ttl in that unit.
///
/// On ZooKeeper a lock's life is the trusted share of the session timeout,
/// at most the ttl; a ttl that leaves no validity leaves none for a shorter
/// life either, so the same rule refuses it at once rather than after a
/// round trip.
pub(crate) fn check_ttl(
    requested: Duration,
    unit: TtlUnit,
    round: Duration,
    drift: impl Fn(Duration) -> Duration,
    min_validity: Duration,
) -> Result<Duration> {
    let Some(ttl) = unit.apply(requested) else {
        let least = if unit.round_up {
            "greater than zero".to_owned()
        } else {
            format!("at least {:?}", unit.unit)
        };
        return Err(Error::config(
            Setting::Ttl,
            format!("ttl must be {least} and at most {MAX_TTL:?}, got {requested:?}"),
        ));
    };
    let drift = drift(ttl);
    if drift.saturating_add(round) >= ttl || min_validity.saturating_add(drift) >= ttl {
        let counted = if unit.round_up {
            format!(" (rounded up to whole {:?})", unit.unit)
        } else {
            String::new()
        };
        return Err(Error::config(
            Setting::Ttl,
            format!(
                "ttl {ttl:?}{counted} leaves no validity after the drift allowance {drift:?}, one \
                 request's timeout {round:?} and the minimum validity {min_validity:?}"
            ),
        ));
    }
    Ok(ttl)
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

    #[test]
    fn one_ttl_rule_in_each_stores_unit() {
        let ms = Duration::from_millis;
        let no_drift = |_| Duration::ZERO;
        let seconds = TtlUnit {
            unit: Duration::from_secs(1),
            round_up: true,
        };
        let millis = |requested| check_ttl(requested, TtlUnit::MILLIS, ms(100), no_drift, Duration::ZERO);
        assert_eq!(millis(Duration::from_micros(1_500_900)).unwrap(), ms(1_500));
        assert!(millis(Duration::from_micros(500)).is_err(), "below one unit");
        assert!(millis(ms(100)).is_err(), "nothing left after one request");
        assert!(millis(MAX_TTL + ms(1)).is_err());
        let lease = |requested| check_ttl(requested, seconds, ms(500), no_drift, Duration::ZERO);
        assert_eq!(lease(ms(1_200)).unwrap(), Duration::from_secs(2));
        assert_eq!(lease(ms(1)).unwrap(), Duration::from_secs(1));
        assert!(lease(Duration::ZERO).is_err());
        let drift = |ttl: Duration| ttl / 2;
        let budget = check_ttl(ms(1_000), TtlUnit::MILLIS, ms(100), drift, ms(500));
        assert!(
            budget.is_err(),
            "the minimum validity and the drift use it all up"
        );
    }
}
