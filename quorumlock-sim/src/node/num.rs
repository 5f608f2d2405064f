//! Numbers as Redis reads and writes them: strict integers (`string2ll`),
//! doubles (`strtod`, no NaN) and `%.17g`.

/// An integer argument as Redis accepts it: optional `-`, no `+`, no
/// leading zeros, no spaces, within `i64`.
pub fn parse_int(text: &[u8]) -> Option<i64> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    let canonical = match digits {
        [] => false,
        [b'0'] => text.len() == 1,
        [first, ..] => (b'1'..=b'9').contains(first) && digits.iter().all(u8::is_ascii_digit),
    };
    if !canonical || text.len() > 20 {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A double argument (a score): what `strtod` takes whole, never NaN.
pub fn parse_float(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

/// `%.17g`: how Redis 7.0 writes a double (a score, a Lua number passed
/// to a command).
pub fn format_double(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let sci = format!("{x:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mantissa), exp.abs())
    } else {
        let decimals = usize::try_from(16 - exp).unwrap_or(0);
        trim_zeros(&format!("{x:.decimals$}")).to_owned()
    }
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_strict() {
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"0"), Some(0));
        for bad in [
            &b"+1"[..],
            b"01",
            b" 1",
            b"-0",
            b"1.0",
            b"",
            b"-",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_int(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn doubles_print_as_percent_17g() {
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(1_700_000_000_000_000.0), "1700000000000000");
        assert_eq!(format_double(-3.0), "-3");
        assert_eq!(format_double(1e-5), "1.0000000000000001e-05");
        assert_eq!(format_double(f64::INFINITY), "inf");
    }
}
