//! `quorumlock check` on an etcd cluster: each member given (latency,
//! version, role), whether the URL's user may do what a lock does (grant a
//! lease, write in a transaction, revoke), and whether a majority of the
//! cluster answers with a leader. The same table printer, findings and exit
//! statuses as for Redis; `--key` shows each lock's holder, as `status` does.

use std::process::ExitCode;

use quorumlock::Inspection;
use quorumlock::probe::etcd::{self as etcd_probe, EtcdProbe, MemberProbe};

use super::{Args, Finding, Level, Report, Store, output, summarize_with};
use crate::exit::Exit;
use crate::nodes::Resolved;
use crate::{fail, status};

const ETCD: Store = Store {
    purpose: "an etcd lock",
    unit: "members",
    row: "member",
    columns: output::ETCD_COLUMNS,
};

pub(super) async fn run(url: &str, nodes: &Resolved, args: &Args) -> ExitCode {
    let probe = match etcd_probe::probe(url, args.timeout).await {
        Ok(probe) => probe,
        Err(message) => return fail(Exit::Usage, message),
    };
    let reports: Vec<Report> = probe.members.iter().map(member).collect();
    let size = probe.cluster_size.unwrap_or(reports.len());
    let mut findings = cluster_findings(&probe, &reports);
    let inspections = match inspect(nodes, args).await {
        Ok(inspections) => inspections,
        Err(message) => {
            findings.push(warning(
                "key_unknown",
                format!("--key: the lock's state could not be read: {message}"),
            ));
            Vec::new()
        }
    };
    let mut summary = summarize_with(
        &reports,
        findings,
        (quorumlock::probe::majority(size), args.strict),
        &ETCD,
    );
    summary.unlisted = size.saturating_sub(reports.len());
    if args.json {
        let mut json = output::json(&reports, &summary);
        json["cluster_size"] = probe.cluster_size.into();
        json["keys"] = status::json(&inspections, summary.code)["keys"].take();
        println!("{json}");
    } else {
        let mut text = output::human(&reports, &summary, &[]);
        for inspection in &inspections {
            text.push_str(&status::headline(inspection));
        }
        print!("{text}");
    }
    ExitCode::from(summary.code)
}

/// The findings about the cluster as a whole.
fn cluster_findings(probe: &EtcdProbe, reports: &[Report]) -> Vec<Finding> {
    let listed = reports.len();
    let size = probe.cluster_size.unwrap_or(listed);
    let majority = quorumlock::probe::majority(size);
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
                 fail over to the others; list every member"
            ),
        ));
    }
    if size.is_multiple_of(2) {
        findings.push(warning(
            "even_members",
            format!(
                "{size} members: an even number needs a majority of {majority}, as {} would, and tolerates no \
                 more failures than {}; use an odd number",
                size + 1,
                size.saturating_sub(1)
            ),
        ));
    }
    // Members that are not listed were not asked: they are not counted
    // against the majority (the warning above asks for them, and a cluster
    // without a majority fails the lock operations too).
    let led = reports.iter().filter(|r| r.level() != Some(Level::Error)).count();
    if led + (size - listed.min(size)) < majority {
        findings.push(error(
            "no_majority",
            format!(
                "only {led} of the cluster's {size} members answer with a leader and a majority needs \
                 {majority}: no lock can be taken or renewed"
            ),
        ));
    }
    findings
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

/// The `--key` locks, as `quorumlock status` reads them.
async fn inspect(nodes: &Resolved, args: &Args) -> Result<Vec<Inspection>, String> {
    if args.keys.is_empty() {
        return Ok(Vec::new());
    }
    let redlock = nodes
        .builder()?
        .node_timeout(args.timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let mut inspections = Vec::with_capacity(args.keys.len());
    for key in &args.keys {
        inspections.push(redlock.inspect(key).await.map_err(|e| e.to_string())?);
    }
    Ok(inspections)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn probe(members: &[(bool, bool)], size: usize, ops: Result<(), String>) -> EtcdProbe {
        let members = members
            .iter()
            .enumerate()
            .map(|(i, &(answers, has_leader))| MemberProbe {
                endpoint: format!("h{i}:2379"),
                latency: answers.then_some(Duration::from_millis(1)),
                leader: i == 0 && has_leader,
                has_leader,
                error: (!answers).then(|| "connection refused".to_owned()),
                ..MemberProbe::default()
            })
            .collect();
        EtcdProbe {
            url: "etcd://h0:2379".into(),
            members,
            cluster_size: Some(size),
            lock_operations: ops,
        }
    }

    fn codes(probe: &EtcdProbe) -> Vec<&'static str> {
        let reports: Vec<Report> = probe.members.iter().map(member).collect();
        let mut codes: Vec<_> = reports
            .iter()
            .flat_map(|r| r.findings.iter().map(|f| f.code))
            .collect();
        codes.extend(cluster_findings(probe, &reports).iter().map(|f| f.code));
        codes
    }

    #[test]
    fn a_dead_member_of_three_is_an_error_row_but_the_majority_stands() {
        let probe = probe(&[(true, true), (true, true), (false, false)], 3, Ok(()));
        assert_eq!(codes(&probe), ["unreachable"]);
    }

    #[test]
    fn two_of_three_members_without_a_leader_is_no_majority() {
        let probe = probe(
            &[(true, false), (false, false), (true, false)],
            3,
            Err("etcdserver: request timed out".into()),
        );
        assert_eq!(
            codes(&probe),
            [
                "no_leader",
                "unreachable",
                "no_leader",
                "lock_operations",
                "no_majority"
            ]
        );
    }

    #[test]
    fn a_partial_list_is_a_warning_and_the_members_not_asked_are_not_counted_against_it() {
        let probe = probe(&[(true, true)], 3, Ok(()));
        assert_eq!(codes(&probe), ["members_missing"]);
        let denied = probe_with_ops(&[(true, true)], 3, "etcdserver: permission denied");
        assert_eq!(codes(&denied), ["lock_operations", "members_missing"]);
        let cut_off = probe_with_ops(&[(true, false), (false, false)], 3, "request timed out");
        assert_eq!(
            codes(&cut_off),
            [
                "no_leader",
                "unreachable",
                "lock_operations",
                "members_missing",
                "no_majority"
            ]
        );
    }

    #[test]
    fn an_even_cluster_is_a_warning() {
        let probe = probe(&[(true, true); 4], 4, Ok(()));
        assert_eq!(codes(&probe), ["even_members"]);
    }

    fn probe_with_ops(members: &[(bool, bool)], size: usize, error: &str) -> EtcdProbe {
        probe(members, size, Err(error.to_owned()))
    }
}
