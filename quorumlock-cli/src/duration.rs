//! Human-friendly durations for the command line: `30s`, `500ms`, `2m`,
//! `1h`, `1m30s`, `1.5s`; a plain number is seconds.

use std::time::Duration;

/// The units accepted after a number, longest first so that `ms` is not
/// read as `m` followed by garbage.
const UNITS: [(&str, f64); 4] = [("ms", 0.001), ("h", 3600.0), ("m", 60.0), ("s", 1.0)];

/// Parses a duration argument (clap `value_parser`).
///
/// # Errors
///
/// A message naming the bad part: empty input, a missing number, an unknown
/// unit, a negative or too large value.
pub(crate) fn parse(input: &str) -> Result<Duration, String> {
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

fn from_seconds(input: &str, seconds: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{input:?} is out of range"))
}

/// Formats a duration the way [`parse`] reads it back (`1.5s`, `250ms`).
pub(crate) fn show(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 && !duration.is_zero() {
        format!("{}us", duration.as_micros())
    } else if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_units_plain_numbers_and_combinations() {
        let ms = Duration::from_millis;
        assert_eq!(parse("30s"), Ok(ms(30_000)));
        assert_eq!(parse("500ms"), Ok(ms(500)));
        assert_eq!(parse("2m"), Ok(ms(120_000)));
        assert_eq!(parse("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse("10"), Ok(ms(10_000)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse(" 0.25 "), Ok(ms(250)));
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        for (input, reason) in [
            ("", "empty"),
            ("5x", "unknown unit \"x\""),
            ("s", "expected a number"),
            ("-3s", "negative"),
            ("1.2.3s", "not a number"),
            ("10 s", "unknown unit"),
            ("1e400", "out of range"),
        ] {
            let error = parse(input).expect_err(input);
            assert!(error.contains(reason), "{input:?}: {error}");
        }
    }

    #[test]
    fn shows_what_parse_reads_back() {
        for text in ["250ms", "1.5s", "30s"] {
            assert_eq!(show(parse(text).unwrap()), text);
        }
    }
}
