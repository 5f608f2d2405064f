//! Percentiles within a round, medians across rounds.

use std::time::Duration;

/// The `q` quantile (0..=1) of `samples` in microseconds (nearest rank);
/// `None` when there are no samples.
pub fn quantile_us(samples: &[Duration], q: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    Some(sorted[at].as_secs_f64() * 1e6)
}

/// The median of `values` (the upper one of an even count); `None` when
/// empty.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// The median over rounds of the per-round ratio `a[i] / b[i]`, for the
/// rounds where both have a value: each ratio compares two adjacent
/// measurements, so slow phases of a shared machine cancel out.
pub fn median_ratio(a: &[Option<f64>], b: &[Option<f64>]) -> Option<f64> {
    median(a.iter().zip(b).filter_map(|(a, b)| Some((*a)? / (*b)?)))
}

/// Formats microseconds for a table: `312 µs`, `2.41 ms`, `12.8 ms`, `1.52 s`.
pub fn fmt_us(us: Option<f64>) -> String {
    match us {
        None => "-".into(),
        Some(us) if us < 1_000.0 => format!("{us:.0} µs"),
        Some(us) if us < 10_000.0 => format!("{:.2} ms", us / 1e3),
        Some(us) if us < 1_000_000.0 => format!("{:.1} ms", us / 1e3),
        Some(us) => format!("{:.2} s", us / 1e6),
    }
}

/// Formats a ratio: `1.03x`.
pub fn fmt_ratio(ratio: Option<f64>) -> String {
    ratio.map_or("-".into(), |r| format!("{r:.2}x"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        let ms = |n| Duration::from_millis(n);
        let samples = [ms(3), ms(1), ms(2), ms(4), ms(5)];
        assert_eq!(quantile_us(&samples, 0.5), Some(3000.0));
        assert_eq!(quantile_us(&samples, 0.99), Some(5000.0));
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(
            median_ratio(&[Some(2.0), None, Some(3.0)], &[Some(1.0), Some(1.0), Some(2.0)]),
            Some(2.0)
        );
    }
}
