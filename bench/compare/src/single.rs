//! (a) one task, uncontended lock+unlock, at N = 1, 3, 5; (f) fenced vs
//! plain in the same rounds.

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

/// Every contender at every N, on direct connections to local nodes.
pub async fn run(nodes: &Nodes, rounds: usize, budget: Budget) -> Vec<Series> {
    let mut series = Vec::new();
    for n in NS {
        let urls = nodes.direct(n);
        let mut contenders = Vec::new();
        for kind in KINDS {
            contenders.push(Contender::connect(kind, &urls, true).await);
        }
        let entries: Vec<Entry<'_>> = KINDS
            .iter()
            .zip(&contenders)
            .map(|(kind, contender)| Entry {
                name: format!("a:{n}:{kind:?}"),
                contender,
                budget,
            })
            .collect();
        let results = rounds::alternate(&entries, rounds).await;
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
