//! SVG line charts of the tables (plotters' SVG backend: text is left to
//! the viewer's fonts, so nothing here needs fontconfig or font files).

use std::path::Path;

use plotters::prelude::*;

/// Line colours, one per contender in the order of `contender::Kind`.
const COLORS: [RGBColor; 9] = [
    RGBColor(0x44, 0x44, 0x44), // raw
    RGBColor(0x99, 0x99, 0x99), // raw (all)
    RGBColor(0x2c, 0xa0, 0x2c), // raw sequential
    RGBColor(0x1f, 0x5f, 0xbf), // quorumlock
    RGBColor(0x6f, 0xa8, 0xdc), // quorumlock fenced
    RGBColor(0xd6, 0x27, 0x28), // rslock
    RGBColor(0xe6, 0x8a, 0x00), // redlock
    RGBColor(0x94, 0x67, 0xbd), // quorumlock on etcd
    RGBColor(0x8c, 0x56, 0x4b), // quorumlock on ZooKeeper
];

/// One line: a name, its (x, y) points, a colour (index into the palette)
/// and a stroke width.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: usize,
    pub width: u32,
}

/// A chart of `lines` over x = node count, y on a log scale.
pub fn chart(path: &Path, title: &str, y_label: &str, xs: &[usize], lines: &[Line]) -> Result<(), String> {
    let ys: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|y| *y > 0.0)
        .collect();
    if ys.is_empty() {
        return Ok(());
    }
    let lo = ys.iter().copied().fold(f64::INFINITY, f64::min) / 1.3;
    let max = ys.iter().copied().fold(0.0, f64::max);
    // Head room at the top (on the log scale) for the legend.
    let hi = max * (max / lo).powf(0.5).max(2.0);
    let x_max = *xs.iter().max().unwrap_or(&5) as f64 + 1.0;
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, (lo..hi).log_scale().with_key_points(ticks(lo, hi)))
        .map_err(|e| e.to_string())?;
    let xs_f: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("nodes (N)")
        .y_desc(y_label)
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&|x| {
            if xs_f.iter().any(|v| (v - x).abs() < 1e-9) {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| {
            if *y >= 10_000.0 {
                format!("{:.0}k", y / 1000.0)
            } else {
                format!("{y:.0}")
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    for line in lines {
        let (color, width) = (COLORS[line.color % COLORS.len()].to_rgba(), line.width);
        let points: Vec<(f64, f64)> = line.points.iter().copied().filter(|p| p.1 > 0.0).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(|e| e.to_string())?
            .label(line.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width)));
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// Ticks 1, 2, 5 per decade between `lo` and `hi`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        ticks.extend(
            [1.0, 2.0, 5.0]
                .map(|m| m * decade)
                .into_iter()
                .filter(|t| (lo..=hi).contains(t)),
        );
        decade *= 10.0;
    }
    ticks
}
