//! The demo's closing chart, in SVG (plotters' SVG backend leaves text to
//! the viewer's fonts, so no font files are needed): the acquire latency as
//! a histogram, and the acquisitions and losses per 100 ms over the run,
//! with the node's kill and restart marked.
//!
//! The figures are the demo's own record of every lock call, not a
//! recorder's: a scrape has totals, the chart needs each call's instant.

use std::path::Path;
use std::time::Duration;

use plotters::coord::Shift;
use plotters::prelude::*;
use tokio::time::Instant;

/// How one lock call of a worker ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    /// Acquired after this long (waits behind other holders included).
    Acquired(Duration),
    /// Another holder kept it for the whole wait.
    Busy,
    /// Lost while the work ran.
    Lost,
    /// Any other error.
    Failed,
}

/// One lock call: when it returned, and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub(crate) at: Instant,
    pub(crate) outcome: Outcome,
}

/// What the chart shows: every call, and when the node was killed and
/// restarted (none with given nodes).
pub(crate) struct Timeline {
    pub(crate) begun: Instant,
    pub(crate) length: Duration,
    pub(crate) calls: Vec<Call>,
    pub(crate) killed: Option<Instant>,
    pub(crate) restarted: Option<Instant>,
}

/// The title of the latency panel.
pub(crate) const LATENCY_TITLE: &str = "acquire latency (ms)";
/// The title of the timeline panel.
pub(crate) const OVER_TIME_TITLE: &str = "acquisitions and losses per 100 ms";

/// The width of a bar of the timeline panel.
const BIN: Duration = Duration::from_millis(100);

/// The latency buckets' upper edges in ms, 1-2-5 per decade: acquisitions
/// take from a fraction of a millisecond (a free lock) to the whole wait
/// (a busy one), which a linear axis would crush into its first bar.
const EDGES_MS: [f64; 13] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];

const ACQUIRED: RGBColor = RGBColor(0x1f, 0x5f, 0xbf);
const LOST: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const KILLED: RGBColor = RGBColor(0x44, 0x44, 0x44);
const RESTARTED: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);

/// Draws the chart of `timeline` to `path`.
pub(crate) fn draw(path: &Path, timeline: &Timeline) -> Result<(), String> {
    let root = SVGBackend::new(path, (860, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled("quorumlock demo", ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(340);
    latency(&top, timeline)?;
    over_time(&bottom, timeline)?;
    root.present().map_err(|e| e.to_string())
}

/// How many acquisitions fall in each bucket of [`EDGES_MS`] (the last
/// one: above them all).
fn buckets(calls: &[Call]) -> Vec<u32> {
    let mut counts = vec![0; EDGES_MS.len() + 1];
    for call in calls {
        if let Outcome::Acquired(waited) = call.outcome {
            let ms = waited.as_secs_f64() * 1000.0;
            let bucket = EDGES_MS.iter().position(|edge| ms <= *edge);
            counts[bucket.unwrap_or(EDGES_MS.len())] += 1;
        }
    }
    counts
}

/// Panel 1: the histogram of acquire latency, one bar per bucket.
fn latency(area: &DrawingArea<SVGBackend, Shift>, timeline: &Timeline) -> Result<(), String> {
    let counts = buckets(&timeline.calls);
    let top = counts.iter().copied().max().unwrap_or(0).max(1);
    let bars = counts.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(LATENCY_TITLE, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..bars, 0f64..f64::from(top) * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(counts.len() + 1)
        .x_label_formatter(&|x| edge_label(*x))
        .x_desc("at most, ms")
        .y_desc("acquisitions")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| e.to_string())?;
    let bars = counts.iter().enumerate().map(|(i, &count)| {
        let x = i as f64;
        Rectangle::new([(x + 0.1, 0.0), (x + 0.9, f64::from(count))], ACQUIRED.filled())
    });
    chart.draw_series(bars).map_err(|e| e.to_string())?;
    Ok(())
}

/// The label under a bar's right edge: the bucket's upper bound in ms.
fn edge_label(x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 1e-9 || i < 1.0 {
        return String::new();
    }
    EDGES_MS
        .get(i as usize - 1)
        .map(|edge| format!("{edge}"))
        .unwrap_or_default()
}

/// Calls per [`BIN`] that ended as `pick` says, over the run.
fn per_bin(timeline: &Timeline, pick: fn(Outcome) -> bool) -> Vec<(f64, f64)> {
    let bins = timeline.length.as_millis().div_ceil(BIN.as_millis()).max(1) as usize;
    let mut counts = vec![0u32; bins];
    for call in timeline.calls.iter().filter(|call| pick(call.outcome)) {
        let since = call.at.saturating_duration_since(timeline.begun);
        let bin = (since.as_millis() / BIN.as_millis()) as usize;
        counts[bin.min(bins - 1)] += 1;
    }
    let width = BIN.as_secs_f64();
    counts
        .into_iter()
        .enumerate()
        .map(|(i, count)| ((i as f64 + 0.5) * width, f64::from(count)))
        .collect()
}

/// Panel 2: acquisitions and losses per 100 ms, the kill and the restart
/// as vertical lines.
fn over_time(area: &DrawingArea<SVGBackend, Shift>, timeline: &Timeline) -> Result<(), String> {
    let acquired = per_bin(timeline, |o| matches!(o, Outcome::Acquired(_)));
    let lost = per_bin(timeline, |o| matches!(o, Outcome::Lost));
    // Head room above the busiest bin for the legend.
    let top = acquired.iter().map(|p| p.1).fold(1.0, f64::max) * 1.5;
    let end = timeline.length.as_secs_f64();
    let mut chart = ChartBuilder::on(area)
        .caption(OVER_TIME_TITLE, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("seconds since the start")
        .y_desc("calls per 100 ms")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| e.to_string())?;
    for (name, points, color) in [("acquisitions", acquired, ACQUIRED), ("losses", lost, LOST)] {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    let marks = [
        ("node killed", timeline.killed, KILLED),
        ("node restarted", timeline.restarted, RESTARTED),
    ];
    for (name, at, color) in marks {
        let Some(at) = at else { continue };
        let x = at.saturating_duration_since(timeline.begun).as_secs_f64();
        chart
            .draw_series(LineSeries::new([(x, 0.0), (x, top)], color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(at_ms: u64, begun: Instant, outcome: Outcome) -> Call {
        Call {
            at: begun + Duration::from_millis(at_ms),
            outcome,
        }
    }

    #[test]
    fn latencies_fall_in_their_buckets_and_calls_in_their_bins() {
        let begun = Instant::now();
        let ms = Duration::from_millis;
        let calls = vec![
            call(10, begun, Outcome::Acquired(Duration::from_micros(300))),
            call(150, begun, Outcome::Acquired(ms(2))),
            call(160, begun, Outcome::Acquired(ms(3))),
            call(170, begun, Outcome::Lost),
            call(180, begun, Outcome::Busy),
            call(999, begun, Outcome::Acquired(ms(9000))),
        ];
        let counts = buckets(&calls);
        assert_eq!((counts[0], counts[2], counts[3]), (1, 1, 1));
        assert_eq!(counts[EDGES_MS.len()], 1, "above every edge");
        assert_eq!(counts.iter().sum::<u32>(), 4, "only acquisitions");
        let timeline = Timeline {
            begun,
            length: ms(500),
            calls,
            killed: None,
            restarted: None,
        };
        let lost = per_bin(&timeline, |o| matches!(o, Outcome::Lost));
        assert_eq!(
            lost.iter().map(|p| p.1).collect::<Vec<_>>(),
            [0.0, 1.0, 0.0, 0.0, 0.0]
        );
        let acquired = per_bin(&timeline, |o| matches!(o, Outcome::Acquired(_)));
        assert_eq!(acquired[1].1, 2.0);
        assert_eq!(acquired[4].1, 1.0, "a late call counts in the last bin");
    }
}
