//! (a) one task, uncontended lock+unlock, at N = 1, 3, 5, and quorumlock on
//! etcd in the N=5 rounds; (f) fenced vs plain in the same rounds.

use crate::contender::{Contender, Kind};
use crate::etcd::{self, Etcd};
use crate::nodes::Nodes;
use crate::rounds::{self, Budget, Entry, Series};

/// Contenders of (a) and (f).
pub const KINDS: [Kind; 6] = [
    Kind::Raw,
    Kind::RawAll,
    Kind::Ours,
    Kind::Fenced,
    Kind::Rslock,
    Kind::Redlock,
];

/// Node counts measured.
pub const NS: [usize; 3] = [1, 3, 5];

/// Every contender at every N, on direct connections to local nodes, and
/// the etcd contender, if given, in the rounds of N = [`etcd::BESIDE`].
pub async fn run(nodes: &Nodes, rounds: usize, budget: Budget, etcd: Option<&Etcd>) -> Vec<Series> {
    let mut series = Vec::new();
    for n in NS {
        let urls = nodes.direct(n);
        let mut contenders = Vec::new();
        for kind in KINDS {
            contenders.push(Contender::connect(kind, &urls, true).await);
        }
        let beside = match etcd {
            Some(etcd) if n == etcd::BESIDE => Some(etcd.contender().await),
            _ => None,
        };
        let mut entries: Vec<Entry<'_>> = KINDS
            .iter()
            .zip(&contenders)
            .map(|(kind, contender)| Entry {
                name: format!("a:{n}:{kind:?}"),
                contender,
                budget,
            })
            .collect();
        entries.extend(beside.as_ref().map(|c| etcd::entry(c, budget)));
        let mut results = rounds::alternate(&entries, rounds).await;
        // The etcd entry came last.
        if beside.is_some() {
            let etcd_rounds = results.pop().expect("the etcd entry's rounds");
            series.push(etcd::series(etcd_rounds, budget));
        }
        for (kind, rounds) in KINDS.into_iter().zip(results) {
            series.push(Series {
                kind,
                n,
                rounds,
                cap: budget.cap,
            });
        }
        eprintln!("  (a) N={n} done");
    }
    series
}
