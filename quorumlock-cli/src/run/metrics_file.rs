//! `run --metrics-file`: the run's outcome and timings, with the library's
//! own metrics, in the Prometheus text format, for node_exporter's textfile
//! collector (the way a cron job reports to Prometheus).
//!
//! Every figure goes through the `metrics` facade into one Prometheus
//! recorder, installed before the client exists, so that the library's
//! metrics land in the same file, and the exporter does the escaping and
//! the type lines. No label holds the key: its values are unbounded.
//!
//! The file is written once, when `run` ends, whatever the ending: the
//! command's own status, a busy or unreachable lock, a loss, a signal while
//! waiting. It is written to `PATH.tmp.<pid>` and renamed over PATH, so that
//! a scrape never reads half a file. A run killed by SIGKILL writes nothing;
//! `quorumlock_run_last_timestamp_seconds` then goes stale, which is what an
//! alert on it is for.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::exit::Exit;
use crate::fail;

/// The status quorumlock exits with: gauge.
const EXIT_CODE: &str = "quorumlock_run_exit_code";
/// How the run ended: gauge, 1; label `outcome` (one of [`OUTCOMES`]).
const OUTCOME: &str = "quorumlock_run_outcome";
/// From the lock call to its answer, the lock or the error: gauge, seconds.
const WAIT: &str = "quorumlock_run_wait_seconds";
/// From taking the lock to giving it back (or losing it): gauge, seconds.
const HELD: &str = "quorumlock_run_held_seconds";
/// From the command's start to the end of its process group: gauge, seconds.
const COMMAND: &str = "quorumlock_run_command_seconds";
/// When the run ended, Unix time: gauge, seconds.
const LAST: &str = "quorumlock_run_last_timestamp_seconds";

/// The values of the `outcome` label, one per way a run ends: the command
/// ran and exited 0, or with another status (a signal's death included);
/// or one of quorumlock's own exit statuses; or a signal ended the wait.
pub(crate) const OUTCOMES: [&str; 10] = [
    "ok",
    "command_failed",
    "usage",
    "busy",
    "unreachable",
    "lost",
    "cannot_execute",
    "not_found",
    "interrupted",
    "internal",
];

/// Options of `run` for the metrics file.
#[derive(clap::Args, Debug)]
pub(crate) struct MetricsArgs {
    /// When run ends, write its outcome and timings and the library's metrics to PATH in the
    /// Prometheus text format (as PATH.tmp.PID, then renamed): for node_exporter's textfile
    /// collector, a *.prom file in its directory
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<PathBuf>,
    /// A `job` label with this value on every line of the metrics file
    #[arg(long, value_name = "NAME", requires = "metrics_file")]
    metrics_job: Option<String>,
}

impl MetricsArgs {
    /// Installs the recorder when a metrics file is asked for; on failure,
    /// says why and returns the exit status.
    pub(crate) fn install(&self) -> Result<Option<MetricsFile>, ExitCode> {
        let Some(path) = &self.metrics_file else {
            return Ok(None);
        };
        let mut builder = PrometheusBuilder::new();
        match self.metrics_job.as_deref() {
            Some("") => return Err(fail(Exit::Usage, "--metrics-job must not be empty")),
            Some(job) => builder = builder.add_global_label("job", job),
            None => {}
        }
        let handle = builder.install_recorder().map_err(|e| {
            fail(
                Exit::Internal,
                format!("cannot install the metrics recorder: {e}"),
            )
        })?;
        describe();
        Ok(Some(MetricsFile {
            path: path.clone(),
            handle,
        }))
    }
}

/// The help lines of the run's own metrics.
fn describe() {
    metrics::describe_gauge!(EXIT_CODE, "the status quorumlock run exited with");
    metrics::describe_gauge!(OUTCOME, "how the run ended: 1 for its outcome");
    metrics::describe_gauge!(WAIT, "from the lock call to its answer");
    metrics::describe_gauge!(HELD, "from taking the lock to giving it back");
    metrics::describe_gauge!(COMMAND, "from the command's start to its end");
    metrics::describe_gauge!(LAST, "when the run ended, Unix time");
}

/// Where the steps of one run happened, for the metrics file.
#[derive(Debug)]
pub(crate) struct Timeline {
    asked: Instant,
    answered: Option<Instant>,
    acquired: Option<Instant>,
    started: Option<Instant>,
    ended: Option<Instant>,
    released: Option<Instant>,
    /// The exit status is the command's own, passed on.
    passed_on: bool,
}

impl Timeline {
    /// A timeline whose lock call is made now.
    pub(crate) fn new() -> Self {
        Timeline {
            asked: Instant::now(),
            answered: None,
            acquired: None,
            started: None,
            ended: None,
            released: None,
            passed_on: false,
        }
    }

    /// The lock call answered: with the lock, or not.
    pub(crate) fn answered(&mut self, acquired: bool) {
        let now = Instant::now();
        self.answered = Some(now);
        self.acquired = acquired.then_some(now);
    }

    /// The command started.
    pub(crate) fn started(&mut self) {
        self.started = Some(Instant::now());
    }

    /// The command's process group ended.
    pub(crate) fn ended(&mut self) {
        self.ended = Some(Instant::now());
    }

    /// The lock was given back, or found lost.
    pub(crate) fn released(&mut self) {
        self.released = Some(Instant::now());
    }

    /// The exit status is the command's own.
    pub(crate) fn passed_on(&mut self) {
        self.passed_on = true;
    }

    /// The `outcome` label of a run that exits with `code`.
    fn outcome(&self, code: u8) -> &'static str {
        if self.passed_on {
            return if code == 0 { "ok" } else { "command_failed" };
        }
        let own = Exit::ALL
            .into_iter()
            .find(|status| status.code() == code && status.applies_to("run"));
        match own {
            Some(Exit::Usage) => "usage",
            Some(Exit::Busy) => "busy",
            Some(Exit::Unreachable) => "unreachable",
            Some(Exit::Lost) => "lost",
            Some(Exit::CannotExecute) => "cannot_execute",
            Some(Exit::NotFound) => "not_found",
            // A signal ended the wait: 128 + its number, never one of ours.
            None if code > Exit::NotFound.code() => "interrupted",
            _ => "internal",
        }
    }
}

/// The file to write at the end of a run, and the recorder that fills it.
pub(crate) struct MetricsFile {
    path: PathBuf,
    handle: PrometheusHandle,
}

impl MetricsFile {
    /// Records the run's own figures and replaces the file. A file that
    /// cannot be written is said, and leaves the exit status as it is: the
    /// command's status matters more to a crontab than the report's.
    pub(crate) fn write(&self, timeline: &Timeline, code: ExitCode) {
        record(timeline, number(code), Instant::now());
        self.handle.run_upkeep();
        if let Err(e) = replace(&self.path, &self.handle.render()) {
            crate::say!(
                "quorumlock: warning: cannot write the metrics file {}: {e}",
                self.path.display()
            );
        }
    }
}

/// Records the run that ends `now` with `code`.
fn record(timeline: &Timeline, code: u8, now: Instant) {
    let between = |from: Option<Instant>, to: Option<Instant>| -> Option<Duration> {
        Some(to.unwrap_or(now).saturating_duration_since(from?))
    };
    metrics::gauge!(EXIT_CODE).set(f64::from(code));
    metrics::gauge!(OUTCOME, "outcome" => timeline.outcome(code)).set(1.0);
    let spans = [
        (WAIT, between(Some(timeline.asked), timeline.answered)),
        (HELD, between(timeline.acquired, timeline.released)),
        (COMMAND, between(timeline.started, timeline.ended)),
    ];
    for (name, span) in spans {
        if let Some(span) = span {
            metrics::gauge!(name).set(span.as_secs_f64());
        }
    }
    let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    metrics::gauge!(LAST).set(unix.as_secs_f64());
}

/// The number of `code`: an `ExitCode` does not give it back, but compares.
fn number(code: ExitCode) -> u8 {
    (0..=u8::MAX)
        .find(|&n| ExitCode::from(n) == code)
        .unwrap_or(Exit::Internal.code())
}

/// Writes `text` to `PATH.tmp.<pid>` and renames it over `path`: a reader
/// sees the old file or the new one, never a part (the textfile collector
/// requires it). The temporary file is removed when anything fails.
fn replace(path: &Path, text: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = fs::File::create(&tmp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_of_run_has_an_outcome_of_the_list() {
        let timeline = Timeline::new();
        for status in Exit::ALL.into_iter().filter(|s| s.applies_to("run")) {
            let outcome = timeline.outcome(status.code());
            assert!(OUTCOMES.contains(&outcome), "{status:?}: {outcome}");
        }
        assert_eq!(timeline.outcome(Exit::Busy.code()), "busy");
        assert_eq!(timeline.outcome(Exit::Lost.code()), "lost");
        assert_eq!(timeline.outcome(130), "interrupted");
    }

    #[test]
    fn the_commands_own_status_is_ok_or_failed_whatever_its_number() {
        let mut timeline = Timeline::new();
        timeline.passed_on();
        assert_eq!(timeline.outcome(0), "ok");
        assert_eq!(timeline.outcome(Exit::Busy.code()), "command_failed");
        assert_eq!(timeline.outcome(143), "command_failed");
    }

    #[test]
    fn exit_codes_give_their_number_back() {
        for n in [0, 3, 75, 255] {
            assert_eq!(number(ExitCode::from(n)), n);
        }
    }
}
