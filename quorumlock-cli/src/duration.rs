//! Durations on the command line: `30s`, `500ms`, `2m`, `1h`, `1m30s`,
//! `1.5s`; a plain number is seconds (the library's format).

use std::time::Duration;

/// Parses a duration argument (clap `value_parser`): the library's
/// format ([`quorumlock::parse_duration`]), so that the command line and
/// the environment read durations alike.
///
/// # Errors
///
/// A message naming the bad part.
pub(crate) fn parse(input: &str) -> Result<Duration, String> {
    quorumlock::parse_duration(input).map_err(|error| match error {
        quorumlock::Error::Config(error) => error.to_string(),
        other => other.to_string(),
    })
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
