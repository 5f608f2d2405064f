//! `quorumlock check` on a ZooKeeper ensemble: each server given in the URL
//! (whether it answers, its mode, version and latency, from the four-letter
//! word `srvr`, the one ZooKeeper 3.8 allows by default), whether a lock can
//! be taken and released through the library, as the URL's user, and
//! whether a majority of the servers listed serves under one leader. The
//! same table printer, findings and exit statuses as for Redis and etcd;
//! `--key` shows each lock's holder, as `status` does.

use std::io;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorumlock::Redlock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::cluster::{self, Checked};
use super::output::{self, Column};
use super::{Args, Finding, Level, Report, Store};
use crate::duration::show;
use crate::exit::Exit;
use crate::fail;
use crate::nodes::Resolved;

/// The ensemble's servers: the role is the server's mode.
const ZOOKEEPER: Store = Store {
    purpose: "a ZooKeeper lock",
    unit: "servers",
    row: "server",
    columns: &[
        cluster::LATENCY,
        output::VERSION,
        Column::new("mode", |r| output::dash(&r.role)),
    ],
    even: "even_servers",
    shortfall: |usable, listed, majority| {
        format!(
            "only {usable} of the {listed} servers serve and a majority needs {majority}: \
             no lock can be taken or kept"
        )
    },
};

/// Most bytes of a `srvr` reply read: a server's is a few hundred bytes,
/// while whatever else listens on a mistyped port may send without end.
const MAX_REPLY: u64 = 64 * 1024;

/// The start of the check's own lock name. Not in the library's reserved
/// namespace, which it refuses as a resource; a random suffix keeps two
/// checks at once from meeting, and the ensemble removes the lock's parent
/// node (a container) once the lock is released.
const PROBE_RESOURCE: &str = "quorumlock-check-";

/// What one server listed in the URL said to `srvr`.
#[derive(Debug, Default)]
struct ServerProbe {
    /// `host:port`, as given.
    server: String,
    /// The time from connecting to the end of the reply.
    latency: Option<Duration>,
    version: String,
    /// `leader`, `follower`, `standalone`, `observer` or `read-only`;
    /// `None` from a server that answers but serves nobody (it looks for a
    /// leader or syncs with one).
    mode: Option<String>,
    /// The last transaction it applied, to compare between servers.
    zxid: String,
    /// Why it did not answer, or why the answer was not `srvr`'s.
    error: Option<String>,
}

impl ServerProbe {
    fn leads(&self) -> bool {
        matches!(self.mode.as_deref(), Some("leader" | "standalone"))
    }
}

pub(super) async fn run(url: &str, nodes: &Resolved, args: &Args) -> ExitCode {
    let redlock = match cluster::client(nodes, args.timeout) {
        Ok(redlock) => redlock,
        Err(message) => return fail(Exit::Usage, message),
    };
    let asked = futures::future::join_all(servers(url).into_iter().map(|s| srvr(s, args.timeout)));
    let (probes, lock_operations) = tokio::join!(asked, round_trip(&redlock, args.ttl));
    let mut checked = assess(&probes, lock_operations);
    checked.inspect(Ok(&redlock), &args.keys).await;
    // Closes the session at once, so that a probe lock whose release failed
    // goes with it rather than at the session's expiry; that failure is
    // already a finding.
    let _ = redlock.shutdown(args.timeout).await;
    checked.finish(args, &ZOOKEEPER, |json| {
        if let Some(rows) = json["nodes"].as_array_mut() {
            for (row, probe) in rows.iter_mut().zip(&probes) {
                row["zxid"] = (!probe.zxid.is_empty()).then(|| probe.zxid.clone()).into();
            }
        }
    })
}

/// The servers of a `zk://` URL the library has accepted, as given: the
/// authority's hosts without the credentials, the chroot and the query.
fn servers(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split_once('?').map_or(rest, |(rest, _)| rest);
    let authority = rest.find('/').map_or(rest, |slash| &rest[..slash]);
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, hosts)| hosts);
    hosts.split(',').map(str::to_owned).collect()
}

/// Asks `server` for `srvr`, the whole exchange bounded by `timeout`.
async fn srvr(server: String, timeout: Duration) -> ServerProbe {
    let started = Instant::now();
    let reply = tokio::time::timeout(timeout, ask(&server)).await;
    let latency = started.elapsed();
    let mut probe = ServerProbe {
        server,
        ..ServerProbe::default()
    };
    match reply {
        Ok(Ok(reply)) => {
            probe.latency = Some(latency);
            read_reply(&mut probe, &reply);
        }
        Ok(Err(e)) => probe.error = Some(e.to_string()),
        Err(_) => probe.error = Some(format!("no reply within {}", show(timeout))),
    }
    probe
}

async fn ask(server: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect(server).await?;
    stream.write_all(b"srvr").await?;
    // The server closes the connection after its reply.
    let mut reply = Vec::new();
    stream.take(MAX_REPLY).read_to_end(&mut reply).await?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Fills `probe` from a `srvr` reply: lines such as `Zookeeper version:
/// 3.8.0-..., built on ...`, `Zxid: 0x...` and `Mode: follower`; a server
/// that serves nobody says only that.
fn read_reply(probe: &mut ServerProbe, reply: &str) {
    let field = |name: &str| {
        reply
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    if let Some(version) = field("Zookeeper version:") {
        let release = version.split(',').next().unwrap_or(version);
        // `3.8.0-<commit>` or a distribution's `3.8.0-3`: the release is
        // what tells servers apart.
        probe.version = release.split('-').next().unwrap_or(release).to_owned();
    }
    probe.zxid = field("Zxid:").unwrap_or_default().to_owned();
    probe.mode = field("Mode:").map(str::to_owned);
    if probe.mode.is_none() && !reply.contains("not currently serving") {
        let first = reply.lines().next().unwrap_or_default();
        let first: String = first.chars().take(80).collect();
        probe.error = Some(format!("not a ZooKeeper srvr reply: {first:?}"));
    }
}

/// Takes and releases a lock through the library, as `run` would: the
/// session, the lock's nodes and the URL's rights on them.
async fn round_trip(redlock: &Redlock, ttl: Duration) -> Result<(), String> {
    let resource = format!("{PROBE_RESOURCE}{:016x}", rand::random::<u64>());
    match redlock.try_lock(resource.as_str(), ttl).await {
        Ok(Some(guard)) => guard
            .release()
            .await
            .map(|_| ())
            .map_err(|e| format!("release: {e}")),
        Ok(None) => Err(format!("lock: {resource:?}, a name nobody else uses, is held")),
        Err(e) => Err(format!("lock: {e}")),
    }
}

/// One server's row and findings.
fn server(probe: &ServerProbe) -> Report {
    // An answer that is not `srvr`'s came from something else on the port.
    let code = if probe.latency.is_some() {
        "bad_reply"
    } else {
        "unreachable"
    };
    let error = probe.error.as_deref().map(|message| (code, message));
    let mut report = cluster::row(&probe.server, probe.latency, &probe.version, error);
    if probe.error.is_some() {
        return report;
    }
    report.role = probe.mode.clone().unwrap_or_default();
    match probe.mode.as_deref() {
        None => report.error(
            "not_serving",
            "this server serves no requests: it is looking for a leader or syncing with one, \
             cut off from a majority",
        ),
        Some("read-only") => report.error(
            "read_only",
            "this server is in read-only mode: it is cut off from a majority and refuses lock writes",
        ),
        Some(_) => {}
    }
    report
}

/// Each server's row, and the findings about the servers listed as a
/// whole: the ensemble is the servers in the URL.
fn assess(probes: &[ServerProbe], lock_operations: Result<(), String>) -> Checked {
    let reports: Vec<Report> = probes.iter().map(server).collect();
    let mut findings = Vec::new();
    if let Err(message) = lock_operations {
        findings.push(Finding::new(
            Level::Error,
            "lock_operations",
            format!("a lock cannot be taken and released as the URL's user: {message}"),
        ));
    }
    let answering: Vec<&ServerProbe> = probes.iter().filter(|p| p.error.is_none()).collect();
    let leaders = answering.iter().filter(|p| p.leads()).count();
    let serving = answering.iter().filter(|p| p.mode.is_some()).count();
    let standalone = answering.iter().any(|p| p.mode.as_deref() == Some("standalone"));
    if !answering.is_empty() && leaders == 0 {
        findings.push(Finding::new(
            Level::Error,
            "no_leader",
            format!(
                "none of the {} servers that answer leads: the ensemble is electing a leader and takes \
                 no lock until it has one, or its leader is not in the URL (list every server)",
                answering.len()
            ),
        ));
    }
    if leaders > 1 || standalone && serving > 1 {
        findings.push(Finding::new(
            Level::Error,
            "several_ensembles",
            format!(
                "{leaders} of the servers listed lead (leader or standalone): they are not one ensemble, \
                 and a client that moves between them sees different locks"
            ),
        ));
    }
    Checked {
        size: reports.len(),
        reports,
        findings,
        inspections: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A follower's reply, as ZooKeeper 3.8 words it.
    const FOLLOWER: &str = "Zookeeper version: 3.8.0-debian--1, built on 2023-01-01 00:00 UTC\n\
        Latency min/avg/max: 0/0.5/3\nReceived: 12\nSent: 11\nConnections: 1\nOutstanding: 0\n\
        Zxid: 0x100000004\nMode: follower\nNode count: 5\n";

    const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests\n";

    fn probe(mode: Option<&str>) -> ServerProbe {
        ServerProbe {
            server: "h:2181".into(),
            latency: Some(Duration::from_millis(1)),
            mode: mode.map(str::to_owned),
            ..ServerProbe::default()
        }
    }

    fn dead() -> ServerProbe {
        ServerProbe {
            server: "h:2181".into(),
            error: Some("connection refused".into()),
            ..ServerProbe::default()
        }
    }

    /// The codes found on servers in these modes: "electing" for one that
    /// answers but serves nobody, "dead" for one that does not answer.
    fn codes(modes: &[&str], ops: Result<(), String>) -> Vec<&'static str> {
        let probes: Vec<ServerProbe> = modes
            .iter()
            .map(|&mode| match mode {
                "dead" => dead(),
                "electing" => probe(None),
                mode => probe(Some(mode)),
            })
            .collect();
        assess(&probes, ops).codes(&ZOOKEEPER)
    }

    #[test]
    fn the_servers_of_a_url_are_its_hosts_alone() {
        assert_eq!(
            servers("zk://u:pw@a:1,b:2,[::1]:3/locks/x?session_timeout=2s"),
            ["a:1", "b:2", "[::1]:3"]
        );
        assert_eq!(servers("zk://a:2181"), ["a:2181"]);
    }

    #[test]
    fn a_srvr_reply_gives_the_mode_the_release_and_the_zxid() {
        let mut follower = probe(None);
        read_reply(&mut follower, FOLLOWER);
        assert_eq!(follower.mode.as_deref(), Some("follower"));
        assert_eq!(follower.version, "3.8.0");
        assert_eq!(follower.zxid, "0x100000004");
        assert!(follower.error.is_none());
        let mut electing = probe(None);
        read_reply(&mut electing, NOT_SERVING);
        assert_eq!((electing.mode, electing.error), (None, None));
        let mut other = probe(None);
        read_reply(&mut other, "HTTP/1.1 400 Bad Request\r\n\r\n");
        assert!(other.error.is_some_and(|e| e.contains("HTTP/1.1 400")));
    }

    #[test]
    fn a_healthy_ensemble_has_no_finding() {
        assert!(codes(&["follower", "leader", "follower"], Ok(())).is_empty());
        assert!(codes(&["standalone"], Ok(())).is_empty());
    }

    #[test]
    fn a_dead_server_of_three_is_an_error_row_but_the_majority_stands() {
        assert_eq!(codes(&["leader", "dead", "follower"], Ok(())), ["unreachable"]);
    }

    #[test]
    fn servers_electing_a_leader_are_no_majority() {
        let timed_out = || Err("lock: timed out".into());
        assert_eq!(
            codes(&["electing", "dead", "electing"], timed_out()),
            [
                "not_serving",
                "unreachable",
                "not_serving",
                "lock_operations",
                "no_leader",
                "no_majority"
            ]
        );
        assert_eq!(
            codes(&["dead", "dead", "dead"], timed_out()),
            [
                "unreachable",
                "unreachable",
                "unreachable",
                "lock_operations",
                "no_majority"
            ]
        );
    }

    #[test]
    fn followers_without_a_listed_leader_are_an_error() {
        assert_eq!(codes(&["follower"; 3], Ok(())), ["no_leader"]);
    }

    #[test]
    fn servers_of_different_ensembles_are_an_error() {
        let several = ["several_ensembles"];
        assert_eq!(codes(&["standalone"; 3], Ok(())), several);
        assert_eq!(codes(&["standalone", "follower", "leader"], Ok(())), several);
    }

    #[test]
    fn a_read_only_server_and_an_even_list_are_reported() {
        let read_only = codes(&["leader", "follower", "read-only"], Ok(()));
        assert_eq!(read_only, ["read_only"]);
        let four = codes(&["leader", "follower", "follower", "follower"], Ok(()));
        assert_eq!(four, ["even_servers"]);
    }
}
