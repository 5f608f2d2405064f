//! `quorumlock check` on an etcd cluster: each member given (latency,
//! version, role), whether the URL's user may do what a lock does (grant a
//! lease, write in a transaction, revoke), and whether the cluster answers
//! with a leader. The same table, findings and exit statuses as for Redis.

use std::process::ExitCode;

use quorumlock::cli_probe_etcd::{self, MemberProbe};

use super::{Args, Finding, Level, Report, output, summarize_with};
use crate::exit::Exit;
use crate::fail;

pub(super) async fn run(url: &str, args: &Args) -> ExitCode {
    if !args.keys.is_empty() {
        return fail(
            Exit::Usage,
            "--key is for Redis nodes; on etcd, `quorumlock status KEY` shows a lock's holder and waiters",
        );
    }
    let probe = match cli_probe_etcd::probe(url, args.timeout).await {
        Ok(probe) => probe,
        Err(message) => return fail(Exit::Usage, message),
    };
    let reports: Vec<Report> = probe.members.iter().map(member).collect();
    let listed = reports.len();
    let size = probe.cluster_size.unwrap_or(listed);
    let mut findings = Vec::new();
    if let Err(message) = &probe.lock_operations {
        findings.push(error(
            "lock_operations",
            format!("the URL's user cannot take a lock (lease grant, transaction, revoke): {message}"),
        ));
    }
    if listed < size {
        findings.push(warning(
            "members_missing",
            format!(
                "{listed} of the cluster's {size} members are listed: when those are down the client cannot \
                 reach the others; list every member"
            ),
        ));
    }
    if size.is_multiple_of(2) {
        findings.push(warning(
            "even_members",
            format!(
                "{size} members: an even number needs a majority of {}, as {} would, and tolerates no more \
                 failures than {}; use an odd number",
                size / 2 + 1,
                size + 1,
                size - 1
            ),
        ));
    }
    let led = reports.iter().filter(|r| r.level() != Some(Level::Error)).count();
    if led == 0 {
        findings.push(error(
            "no_leader",
            "no member listed answers with a leader: the cluster has lost its majority (or is cut off), and no \
             lock can be taken",
        ));
    }
    let summary = summarize_with(&reports, findings, (size / 2 + 1, args.strict), "an etcd lock");
    if args.json {
        println!("{}", output::json(&reports, &summary));
    } else {
        print!("{}", output::human(&reports, &summary, &[]));
    }
    ExitCode::from(summary.code)
}

/// One member's row and findings.
fn member(probe: &MemberProbe) -> Report {
    let mut report = Report {
        name: probe.endpoint.clone(),
        ping: probe.latency,
        version: probe.version.clone(),
        ..Report::default()
    };
    if let Some(message) = &probe.error {
        report.error("unreachable", format!("no answer: {message}"));
        return report;
    }
    report.role = if probe.leader { "leader" } else { "follower" }.to_owned();
    if !probe.has_leader {
        report.error(
            "no_leader",
            "this member knows no leader: it is cut off from a majority and refuses lock requests",
        );
    }
    report
}

fn error(code: &'static str, message: impl Into<String>) -> Finding {
    Finding {
        level: Level::Error,
        code,
        message: message.into(),
    }
}

fn warning(code: &'static str, message: impl Into<String>) -> Finding {
    Finding {
        level: Level::Warning,
        code,
        message: message.into(),
    }
}
