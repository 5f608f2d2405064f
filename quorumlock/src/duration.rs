//! Durations as people write them, for the environment and the command
//! line, and deadlines that far ahead.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::FAR_FUTURE;
use crate::error::{Error, Result, Setting};

/// The units accepted after a number, longest first so that `ms` is not
/// read as `m` followed by garbage.
const UNITS: [(&str, f64); 4] = [("ms", 0.001), ("h", 3600.0), ("m", 60.0), ("s", 1.0)];

/// Parses a duration as the command line and the environment give it:
/// `30s`, `500ms`, `2m`, `1h`, `1m30s`, `1.5s`; a plain number is seconds.
///
/// # Errors
///
/// [`Error::Config`] naming the bad part: empty input, a missing number, an
/// unknown unit, a negative or too large value.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::parse_duration;
///
/// assert_eq!(parse_duration("1m30s")?, Duration::from_secs(90));
/// assert_eq!(parse_duration("250ms")?, Duration::from_millis(250));
/// assert_eq!(parse_duration("2")?, Duration::from_secs(2));
/// assert!(parse_duration("5 parsecs").is_err());
/// # Ok::<(), quorumlock::Error>(())
/// ```
pub fn parse_duration(input: &str) -> Result<Duration> {
    parse(input).map_err(|message| Error::config(Setting::Duration, message))
}

fn parse(input: &str) -> std::result::Result<Duration, String> {
    let text = input.trim();
    if text.is_empty() {
        return Err("empty duration (use e.g. 30s, 500ms, 2m or 1h)".into());
    }
    if text.starts_with('-') {
        return Err(format!("{input:?} is negative"));
    }
    // A plain number is seconds, as in sleep(1).
    if let Ok(seconds) = text.parse::<f64>() {
        return from_seconds(input, seconds);
    }
    let mut rest = text;
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "{input:?}: expected a number before {rest:?} (use e.g. 30s, 500ms, 2m or 1h)"
            ));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{input:?}: {:?} is not a number", &rest[..digits]))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let Some((_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(if unit.is_empty() {
                format!("{input:?}: a unit is missing after {number} (use ms, s, m or h)")
            } else {
                format!("{input:?}: unknown unit {unit:?} (use ms, s, m or h, e.g. 30s, 500ms, 2m)")
            });
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    from_seconds(input, total)
}

fn from_seconds(input: &str, seconds: f64) -> std::result::Result<Duration, String> {
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{input:?} is out of range"))
}

/// The instant `after` from now, or one so far ahead that it never comes
/// (for a wait or a timeout of `Duration::MAX`, "no limit"): an `Instant`
/// cannot hold every `Duration`, and adding one that does not fit panics.
pub(crate) fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after).unwrap_or(now + FAR_FUTURE)
}
