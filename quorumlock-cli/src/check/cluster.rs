//! What the checks of the two consensus stores, an etcd cluster and a
//! ZooKeeper ensemble, share. Each is one store that serves the lock while
//! a majority of its servers does: its check reads each server's state
//! ([`super::etcd`], [`super::zookeeper`]), and shows the `--key` locks as
//! `quorumlock status` does, once for the store rather than per row. The
//! client, the `--key` reads, the common column and the output are here.

use std::process::ExitCode;
use std::time::Duration;

use quorumlock::{Inspection, Redlock};
use serde_json::Value;

use super::output::{self, Column};
use super::{Args, Finding, Level, Report, Store, summarize};
use crate::nodes::Resolved;
use crate::status;

/// The round trip column: neither persistence nor clocks are the lock's
/// concern on these stores (they sync their log and time leases or
/// sessions on their leader), so the table is latency, version and role.
pub(super) const LATENCY: Column = Column::new("latency", output::latency);

/// A consensus store's check, as found: each server's row and what was
/// found about the store as a whole.
pub(super) struct Checked {
    pub(super) reports: Vec<Report>,
    pub(super) findings: Vec<Finding>,
    /// How many servers the store has: at least those listed.
    pub(super) size: usize,
    /// The `--key` locks.
    pub(super) inspections: Vec<Inspection>,
}

impl Checked {
    /// Reads the `--key` locks through `redlock` (or the reason there is no
    /// client). A lock that cannot be read is a warning, not a failed
    /// check: the store may still be fit for locks.
    pub(super) async fn inspect(&mut self, redlock: Result<&Redlock, String>, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        let read = async {
            let redlock = redlock?;
            let mut inspections = Vec::with_capacity(keys.len());
            for key in keys {
                inspections.push(redlock.inspect(key).await.map_err(|e| e.to_string())?);
            }
            Ok::<_, String>(inspections)
        };
        match read.await {
            Ok(inspections) => self.inspections = inspections,
            Err(message) => self.findings.push(Finding::new(
                Level::Warning,
                "key_unknown",
                format!("--key: the lock's state could not be read: {message}"),
            )),
        }
    }

    /// Prints the verdict: the table with a headline for each `--key` lock,
    /// or the JSON object with the locks under `keys` and the store's own
    /// fields (`extend`). Returns the exit status.
    pub(super) fn finish(
        self,
        args: &Args,
        store: &'static Store,
        extend: impl FnOnce(&mut Value),
    ) -> ExitCode {
        let summary = summarize(&self.reports, self.findings, (self.size, args.strict), store);
        if args.json {
            let mut json = output::json(&self.reports, &summary);
            extend(&mut json);
            json["keys"] = status::json(&self.inspections, summary.code)["keys"].take();
            println!("{json}");
        } else {
            let mut text = output::human(&self.reports, &summary, &[]);
            for inspection in &self.inspections {
                text.push_str(&status::headline(inspection));
            }
            print!("{text}");
        }
        ExitCode::from(summary.code)
    }

    /// The codes of every finding, the rows' first, as the check reports
    /// them: what the stores' unit tests compare.
    #[cfg(test)]
    pub(super) fn codes(self, store: &'static Store) -> Vec<&'static str> {
        let summary = summarize(&self.reports, self.findings, (self.size, false), store);
        let rows = self.reports.iter().flat_map(|r| r.findings.iter());
        rows.chain(&summary.findings).map(|f| f.code).collect()
    }
}

/// A client over the store, for the check's own lock and the `--key`
/// reads: `--timeout` bounds connecting as well as each request, as it
/// does for the probes of the servers.
pub(super) fn client(nodes: &Resolved, timeout: Duration) -> Result<Redlock, String> {
    nodes
        .builder()?
        .node_timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(|e| e.to_string())
}

/// A server's row as it answered: its name, round trip and version, or,
/// when it gave no answer (`error`), an error row that says why. The role
/// is the store's to fill in.
pub(super) fn row(
    name: &str,
    latency: Option<Duration>,
    version: &str,
    error: Option<(&'static str, &str)>,
) -> Report {
    let mut report = Report {
        name: name.to_owned(),
        ping: latency,
        version: version.to_owned(),
        ..Report::default()
    };
    if let Some((code, message)) = error {
        report.error(code, format!("no answer: {message}"));
    }
    report
}
