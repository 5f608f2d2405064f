//! The smoke run's verdict: with tiny counts, the benchmark code ran and
//! quorumlock worked in every scenario measured.

use crate::Results;
use crate::contender::Kind;
use crate::targets;

/// In smoke mode: the benchmark code ran and quorumlock worked in every
/// scenario. Peers are not judged here (their failures are the report's).
pub fn checks(results: &Results, targets: &[targets::Target]) {
    let mut checks: Vec<(String, bool)> = Vec::new();
    let checked = |kind: Kind| {
        matches!(
            kind,
            Kind::Raw
                | Kind::RawAll
                | Kind::RawSeq
                | Kind::Ours
                | Kind::Fenced
                | Kind::Etcd
                | Kind::ZooKeeper
        )
    };
    let network = results.network.as_ref();
    let series = results
        .single
        .iter()
        .flatten()
        .chain(network.into_iter().flat_map(|n| n.latency.iter()));
    for s in series.chain(network.into_iter().flat_map(|n| n.healthy.iter().chain(&n.holed))) {
        if checked(s.kind) {
            let ok = s.cycles() > 0 && s.errors() == 0 && !s.capped();
            checks.push((format!("{} at N={}", s.kind.label(), s.n), ok));
        }
    }
    for rate in results.throughput.iter().flatten() {
        if checked(rate.kind) {
            let ok = rate.errors == 0 && rate.median().is_some_and(|r| r > 0.0);
            checks.push((
                format!("{} throughput N={} x{}", rate.kind.label(), rate.n, rate.tasks),
                ok,
            ));
        }
    }
    for c in results.shards.iter().flatten() {
        let ok = c.errors == 0 && c.median().is_some_and(|r| r > 0.0);
        checks.push((format!("(g) {} x{}", c.members.label(), c.tasks), ok));
    }
    for pool in results.semaphore.iter().flatten() {
        let ok = pool.errors == 0 && pool.rounds.iter().all(|&r| r > 0.0);
        checks.push((format!("(h) {} x{}", pool.way.label(), pool.tasks), ok));
    }
    for (setup, rounds) in results.handoff.iter().flatten() {
        let ok = rounds.iter().all(|r| r.handoffs > 0 && !r.gaps.is_empty());
        checks.push((format!("hand-off {}", setup.label()), ok));
    }
    // Scenarios (g) and (h) have no targets: alone, they evaluate none.
    let with_targets = results.single.is_some()
        || results.throughput.is_some()
        || results.network.is_some()
        || results.handoff.is_some();
    if with_targets {
        checks.push(("targets evaluated".into(), !targets.is_empty()));
    }
    let failed: Vec<&String> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| name)
        .collect();
    for name in &failed {
        eprintln!("smoke check failed: {name}");
    }
    println!(
        "compare smoke: {} passed, {} failed",
        checks.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
