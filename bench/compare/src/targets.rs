//! The targets quorumlock's figures are held to: each is a bound on one
//! figure of a scenario's tables (a ratio to the raw limit or to a peer, or
//! a hand-off gap), recorded with the figure measured and whether it met
//! the bound, and listed in a table of their own after the scenarios.

use std::fmt::Write;

/// One target: what, the measured figure, met or not.
pub struct Target {
    /// The scenario whose tables hold the figure: `(a)` to `(f)`.
    pub scenario: &'static str,
    /// The bound, as the table shows it.
    pub what: String,
    /// The figure measured, formatted; `-` when it was not measured.
    pub measured: String,
    /// Whether the figure met the bound; `None` when it was not measured.
    pub met: Option<bool>,
}

/// The targets table: one row per target, in the order they were recorded.
pub fn table(md: &mut String, targets: &[Target]) {
    let _ = writeln!(md, "### Targets\n");
    let _ = writeln!(
        md,
        "| scenario | target | measured (median of per-round ratios) | |"
    );
    let _ = writeln!(md, "|---|---|---|---|");
    for t in targets {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured",
        };
        let _ = writeln!(md, "| {} | {} | {} | {verdict} |", t.scenario, t.what, t.measured);
    }
    let _ = writeln!(md);
}

/// Records a target that `value` be at most `max`.
pub fn push_max(targets: &mut Vec<Target>, scenario: &'static str, what: &str, value: Option<f64>, max: f64) {
    push(targets, scenario, what, value, |v| v <= max);
}

/// Records a target that `value` be at least `min`.
pub fn push_min(targets: &mut Vec<Target>, scenario: &'static str, what: &str, value: Option<f64>, min: f64) {
    push(targets, scenario, what, value, |v| v >= min);
}

/// Records a target whose bound `ok` checks; a figure of a gap is in ms,
/// any other a ratio.
fn push(
    targets: &mut Vec<Target>,
    scenario: &'static str,
    what: &str,
    value: Option<f64>,
    ok: impl Fn(f64) -> bool,
) {
    let unit = if what.contains("gap p") { " ms" } else { "x" };
    targets.push(Target {
        scenario,
        what: what.to_owned(),
        measured: value.map_or("-".into(), |v| format!("{v:.2}{unit}")),
        met: value.map(ok),
    });
}
