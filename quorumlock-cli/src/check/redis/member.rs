//! A Redis Cluster or a Sentinel-managed master as one node: what it is
//! made of as it answers now ([`quorumlock::probe::member_layout`]), then the
//! probes of [`super::node`] on each of the cluster's primaries, or on the
//! master the sentinels name.

use std::time::Duration;

use futures::future::join_all;
use quorumlock::probe::MemberLayout;
use serde_json::{Value, json};

use super::node;
use super::shard::Shard;
use crate::check::{Args, Report};
use crate::duration::show;
use crate::nodes::{Resolved, is_redis_cluster, is_sentinel};

/// The number of hash slots of a Redis Cluster.
const SLOTS: usize = 16384;

/// Whether `url` names a Redis Cluster or a Sentinel-managed master.
pub(super) fn is_member(url: &str) -> bool {
    is_redis_cluster(url) || is_sentinel(url)
}

/// The parts of a member URL that its servers' URLs are made of, read as
/// the library reads them.
struct Parts<'a> {
    scheme: &'a str,
    /// `redis` or `rediss`.
    base: &'a str,
    /// `user:password@`, or empty.
    credentials: &'a str,
    hosts: &'a str,
    /// After the first `/`, without it and the query.
    path: &'a str,
    /// `?...`, or empty.
    query: &'a str,
}

fn parts(url: &str) -> Parts<'_> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (path, query) = match path.find('?') {
        Some(at) => (&path[..at], &path[at..]),
        None => (path, ""),
    };
    let (credentials, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    Parts {
        scheme,
        base: scheme.split('+').next().unwrap_or("redis"),
        credentials,
        hosts,
        path,
        query,
    }
}

impl Parts<'_> {
    /// The member's name without credentials, as the library names it.
    fn name(&self) -> String {
        let (scheme, hosts) = (self.scheme, self.hosts);
        if scheme.ends_with("+sentinel") {
            let master = self.path.split('/').next().unwrap_or_default();
            format!("{scheme}://{hosts}/{master}")
        } else {
            format!("{scheme}://{hosts}")
        }
    }

    /// The URL of the member's server at `address` (`host:port`), with the
    /// member's credentials, transport and query, and database `db`.
    fn server_url(&self, address: &str, db: &str) -> String {
        let (base, credentials, query) = (self.base, self.credentials, self.query);
        format!("{base}://{credentials}{address}/{db}{query}")
    }

    /// The master's database on a Sentinel member: after its name.
    fn master_db(&self) -> &str {
        let db = self
            .path
            .split_once('/')
            .map_or("", |(_, db)| db)
            .trim_matches('/');
        if db.is_empty() { "0" } else { db }
    }
}

/// Asks the member what it is made of and probes its servers; never fails,
/// problems go into the report.
pub(super) async fn probe(url: &str, nodes: &Resolved, args: &Args, drift: Duration) -> Report {
    let parts = parts(url);
    let mut report = Report {
        name: parts.name(),
        ..Report::default()
    };
    // The library asks the listed servers one after the other.
    let hosts = u32::try_from(parts.hosts.split(',').count()).unwrap_or(u32::MAX);
    let limit = args.timeout.saturating_mul(hosts.saturating_add(1));
    let layout = match tokio::time::timeout(limit, quorumlock::probe::member_layout(url, args.timeout)).await
    {
        Ok(Ok(layout)) => layout,
        Ok(Err(e)) => {
            report.error("bad_url", e);
            return report;
        }
        Err(_) => {
            report.error(
                "unreachable",
                format!("unreachable: no answer within {}", show(limit)),
            );
            return report;
        }
    };
    match &layout {
        MemberLayout::Cluster { primaries } => {
            report.role = "cluster".into();
            judge_slots(&mut report, primaries);
            let probes = primaries.iter().map(|(address, _)| {
                let url = parts.server_url(address, "0");
                let shard = Shard {
                    layout: &layout,
                    address,
                };
                async move { node::probe(&url, nodes, args, drift, Some(&shard)).await }
            });
            report.servers = join_all(probes).await;
        }
        MemberLayout::Sentinel { name, master } => {
            report.role = "sentinel".into();
            match master {
                Ok(address) => {
                    let url = parts.server_url(address, parts.master_db());
                    report.servers = vec![node::probe(&url, nodes, args, drift, None).await];
                }
                Err(e) => report.error(
                    "no_master",
                    format!(
                        "the sentinels name no server for master {name:?} now ({e}): no lock can be taken \
                         on this node"
                    ),
                ),
            }
        }
        MemberLayout::Server => {}
    }
    report.layout = Some(layout);
    // Each key as the server that holds it sees it.
    report.keys = args
        .keys
        .iter()
        .filter_map(|key| {
            let mut seen = report.servers.iter().flat_map(|s| &s.keys);
            seen.find(|k| &k.key == key).cloned()
        })
        .collect();
    report
}

/// An error when no primary answered, or when some slots have none.
fn judge_slots(report: &mut Report, primaries: &[(String, Vec<(u16, u16)>)]) {
    if primaries.is_empty() {
        report.error(
            "unreachable",
            "none of its servers answered CLUSTER SLOTS (unreachable, authentication failed, or the user \
             may not run CLUSTER SLOTS): no lock can be taken on this node",
        );
        return;
    }
    let uncovered = uncovered(primaries);
    if !uncovered.is_empty() {
        let count: usize = uncovered.iter().map(|&(first, last)| last - first + 1).sum();
        report.error(
            "slots_uncovered",
            format!(
                "{count} of {SLOTS} hash slots are served by no primary ({}): a lock whose key hashes there \
                 cannot be taken on this node; assign every slot (redis-cli --cluster fix)",
                show_ranges(&uncovered)
            ),
        );
    }
}

/// The slot ranges that no primary serves.
fn uncovered(primaries: &[(String, Vec<(u16, u16)>)]) -> Vec<(usize, usize)> {
    let mut served = vec![false; SLOTS];
    for &(first, last) in primaries.iter().flat_map(|(_, ranges)| ranges) {
        let (first, last) = (usize::from(first), usize::from(last).min(SLOTS - 1));
        served
            .get_mut(first..=last)
            .into_iter()
            .flatten()
            .for_each(|s| *s = true);
    }
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for slot in (0..SLOTS).filter(|&slot| !served[slot]) {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == slot => *last = slot,
            _ => ranges.push((slot, slot)),
        }
    }
    ranges
}

/// `0-5460, 5462`: slot ranges as people write them.
fn show_ranges<T: PartialEq + std::fmt::Display>(ranges: &[(T, T)]) -> String {
    let shown: Vec<String> = ranges
        .iter()
        .map(|(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    shown.join(", ")
}

/// What a member is made of, for the human output; `None` for a server.
pub(in crate::check) fn describe(layout: &MemberLayout) -> Option<String> {
    match layout {
        MemberLayout::Server => None,
        MemberLayout::Cluster { primaries } => {
            let shown: Vec<String> = primaries
                .iter()
                .map(|(address, ranges)| format!("{address} (slots {})", show_ranges(ranges)))
                .collect();
            Some(format!("Redis Cluster, primaries {}", shown.join(", ")))
        }
        MemberLayout::Sentinel { name, master } => Some(match master {
            Ok(address) => format!("Sentinel master {name} at {address}"),
            Err(_) => format!("Sentinel master {name}, at no server now"),
        }),
    }
}

/// The same as JSON fields: `kind`, and the primaries or the master.
pub(in crate::check) fn json(layout: &MemberLayout) -> Value {
    match layout {
        MemberLayout::Server => json!({"kind": "server"}),
        MemberLayout::Cluster { primaries } => json!({
            "kind": "cluster",
            "primaries": primaries.iter().map(|(address, ranges)| json!({
                "address": address,
                "slots": ranges.iter().map(|&(first, last)| [first, last]).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        MemberLayout::Sentinel { name, master } => json!({
            "kind": "sentinel",
            "master_name": name,
            "master": master.as_ref().ok(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_url_keeps_the_members_credentials_transport_and_database() {
        let cluster = parts("rediss+cluster://u:p@w@a:1,b:2/?protocol=resp3");
        assert_eq!(cluster.name(), "rediss+cluster://a:1,b:2");
        assert_eq!(
            cluster.server_url("10.0.0.9:7002", "0"),
            "rediss://u:p@w@10.0.0.9:7002/0?protocol=resp3"
        );
        let sentinel = parts("redis+sentinel://:pw@s1:1,s2:2/mymaster/3");
        assert_eq!(sentinel.name(), "redis+sentinel://s1:1,s2:2/mymaster");
        assert_eq!(
            sentinel.server_url("h:6379", sentinel.master_db()),
            "redis://:pw@h:6379/3"
        );
        let default_db = parts("redis+sentinel://s1:1/mymaster");
        assert_eq!(
            default_db.server_url("h:6379", default_db.master_db()),
            "redis://h:6379/0"
        );
    }

    #[test]
    fn slots_no_primary_serves_are_found_and_named() {
        let primaries = |ranges: Vec<(u16, u16)>| vec![("h:1".to_owned(), ranges)];
        assert!(uncovered(&primaries(vec![(0, 8000), (8001, 16383)])).is_empty());
        let gaps = uncovered(&primaries(vec![(1, 99), (101, 16382)]));
        assert_eq!(gaps, [(0, 0), (100, 100), (16383, 16383)]);
        assert_eq!(show_ranges(&[(0, 5), (7, 7)]), "0-5, 7");
        let mut report = Report::default();
        judge_slots(&mut report, &primaries(vec![(0, 10000)]));
        assert_eq!(report.findings[0].code, "slots_uncovered");
        assert!(
            report.findings[0].message.contains("6383 of 16384"),
            "{:?}",
            report.findings
        );
        let mut report = Report::default();
        judge_slots(&mut report, &[]);
        assert_eq!(report.findings[0].code, "unreachable");
    }
}
