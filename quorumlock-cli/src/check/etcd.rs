//! `quorumlock check` on an etcd cluster: each member given (latency,
//! version, role), whether the URL's user may do what a lock does (grant a
//! lease, write in a transaction, revoke), and whether a majority of the
//! cluster answers with a leader. The same table printer, findings and exit
//! statuses as for Redis; `--key` shows each lock's holder, as `status` does.

use std::process::ExitCode;

use quorumlock::probe::etcd::{self as etcd_probe, EtcdProbe, MemberProbe};

use super::cluster::{self, Checked};
use super::{Args, Finding, Level, Report, Store, output};
use crate::exit::Exit;
use crate::fail;
use crate::nodes::Resolved;

const ETCD: Store = Store {
    purpose: "an etcd lock",
    unit: "members",
    row: "member",
    columns: &[cluster::LATENCY, output::VERSION, output::ROLE],
    even: "even_members",
    shortfall: |led, size, majority| {
        format!(
            "only {led} of the cluster's {size} members answer with a leader and a majority needs \
             {majority}: no lock can be taken or renewed"
        )
    },
};

pub(super) async fn run(url: &str, nodes: &Resolved, args: &Args) -> ExitCode {
    let probe = match etcd_probe::probe(url, args.timeout).await {
        Ok(probe) => probe,
        Err(message) => return fail(Exit::Usage, message),
    };
    let mut checked = assess(&probe);
    // The etcd client connects on its first request: without `--key`, it
    // never does.
    let client = cluster::client(nodes, args.timeout);
    checked
        .inspect(client.as_ref().map_err(String::clone), &args.keys)
        .await;
    checked.finish(args, &ETCD, |json| {
        json["cluster_size"] = probe.cluster_size.into()
    })
}

/// Each member's row, and the findings about the cluster as a whole. The
/// cluster's size is what it says of itself, or the members listed when it
/// said nothing.
fn assess(probe: &EtcdProbe) -> Checked {
    let reports: Vec<Report> = probe.members.iter().map(member).collect();
    let listed = reports.len();
    let size = probe.cluster_size.unwrap_or(listed);
    let mut findings = Vec::new();
    if let Err(message) = &probe.lock_operations {
        findings.push(Finding::new(
            Level::Error,
            "lock_operations",
            format!("the URL's user cannot take a lock (lease grant, transaction, revoke): {message}"),
        ));
    }
    if listed < size {
        findings.push(Finding::new(
            Level::Warning,
            "members_missing",
            format!(
                "{listed} of the cluster's {size} members are listed: when those are down the client cannot \
                 fail over to the others; list every member"
            ),
        ));
    }
    Checked {
        reports,
        findings,
        size,
        inspections: Vec::new(),
    }
}

/// One member's row and findings.
fn member(probe: &MemberProbe) -> Report {
    let error = probe.error.as_deref().map(|message| ("unreachable", message));
    let mut report = cluster::row(&probe.endpoint, probe.latency, &probe.version, error);
    if probe.error.is_none() {
        report.role = if probe.leader { "leader" } else { "follower" }.to_owned();
        if !probe.has_leader {
            report.error(
                "no_leader",
                "this member knows no leader: it is cut off from a majority and refuses lock requests",
            );
        }
    }
    report
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
        assess(probe).codes(&ETCD)
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
