//! (a) one task, uncontended lock+unlock, at N = 1, 3, 5, and quorumlock on
//! etcd and ZooKeeper in the N=5 rounds; (f) fenced vs plain in the same
//! rounds.

use crate::consensus::{self, Store};
use crate::contender::{Contender, Kind};
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
/// the contenders of the consensus `stores` in the rounds of
/// N = [`consensus::BESIDE`].
pub async fn run(nodes: &Nodes, rounds: usize, budget: Budget, stores: &[Store]) -> Vec<Series> {
    let mut series = Vec::new();
    for n in NS {
        let urls = nodes.direct(n);
        let mut contenders = Vec::new();
        for kind in KINDS {
            contenders.push(Contender::connect(kind, &urls).await);
        }
        let mut beside = Vec::new();
        for store in stores.iter().filter(|_| n == consensus::BESIDE) {
            beside.push(store.contender().await);
        }
        let mut entries: Vec<Entry<'_>> = KINDS
            .iter()
            .zip(&contenders)
            .map(|(kind, contender)| Entry {
                name: format!("a:{n}:{kind:?}"),
                contender,
                budget,
            })
            .collect();
        entries.extend(stores.iter().zip(&beside).map(|(s, c)| s.entry(c, budget)));
        let mut results = rounds::alternate(&entries, rounds).await;
        // The stores' entries came last.
        let stores_rounds = results.split_off(KINDS.len());
        for (store, rounds) in stores.iter().zip(stores_rounds) {
            series.push(store.series(rounds, budget));
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
