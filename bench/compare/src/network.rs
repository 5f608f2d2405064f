//! (c) every node behind a proxy that adds 1 ms each way (a round trip of
//! about 2 ms, a real network): lock+unlock p50 at N = 1 and N = 5.
//! (d) the same with one of five nodes black-holed (connections accepted,
//! nothing answered), against the healthy five in the same rounds.

use std::time::Duration;

use crate::contender::{Contender, Kind};
use crate::nodes::{Nodes, Proxy};
use crate::rounds::{self, Budget, Entry, Series};

/// Latency the proxies add in each direction.
pub const LATENCY: Duration = Duration::from_millis(1);

/// Contenders of (c).
pub const KINDS_C: [Kind; 6] = [
    Kind::Raw,
    Kind::RawAll,
    Kind::RawSeq,
    Kind::Ours,
    Kind::Rslock,
    Kind::Redlock,
];

/// Contenders of (d).
pub const KINDS_D: [Kind; 4] = [Kind::Raw, Kind::Ours, Kind::Rslock, Kind::Redlock];

/// Results of (c) and (d).
pub struct Network {
    /// (c): every kind at N = 1 and N = 5.
    pub latency: Vec<Series>,
    /// (d): every kind at N = 5, healthy.
    pub healthy: Vec<Series>,
    /// (d): every kind at N = 5 with one node black-holed.
    pub holed: Vec<Series>,
    /// p50 of a `PING` round trip through one proxy (µs): what "1 ms each
    /// way" came to, with the proxy's timer granularity.
    pub ping_p50: Option<f64>,
}

/// Budgets of (c) and (d): `fast` for contenders whose cycle costs a few
/// round trips, `slow` for those known to wait out timeouts or hang when a
/// node is black-holed (rslock, redlock): fewer cycles, the same cap.
pub struct Budgets {
    pub latency: Budget,
    pub healthy: Budget,
    pub holed_fast: Budget,
    pub holed_slow: Budget,
}

/// Runs (c) when `latency`, (d) when `hole` (the other stays empty).
pub async fn run(nodes: &Nodes, rounds: usize, budgets: &Budgets, latency: bool, hole: bool) -> Network {
    let proxies: Vec<Proxy> = (0..5).map(|i| nodes.proxy(i, LATENCY)).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let ping_p50 = ping(&urls[0]).await;
    let latency = if latency {
        let series = latency_rounds(&urls, rounds, budgets.latency).await;
        eprintln!("  (c) done");
        series
    } else {
        Vec::new()
    };
    if !hole {
        return Network {
            latency,
            healthy: Vec::new(),
            holed: Vec::new(),
            ping_p50,
        };
    }
    let (healthy, holed) = hole_rounds(nodes, proxies, &urls, rounds, budgets).await;
    Network {
        latency,
        healthy,
        holed,
        ping_p50,
    }
}

/// (c): every kind at N = 1 and N = 5 in the same rounds, so that their
/// ratio is measured under the same load.
async fn latency_rounds(urls: &[String], rounds: usize, budget: Budget) -> Vec<Series> {
    let mut contenders = Vec::new();
    for n in [1, 5] {
        for kind in KINDS_C {
            contenders.push((n, kind, Contender::connect(kind, &urls[..n]).await));
        }
    }
    let entries: Vec<Entry<'_>> = contenders
        .iter()
        .map(|(n, kind, contender)| Entry {
            name: format!("c:{n}:{kind:?}"),
            contender,
            budget,
        })
        .collect();
    let results = rounds::alternate(&entries, rounds).await;
    contenders
        .iter()
        .zip(results)
        .map(|((n, kind, _), rounds)| Series {
            kind: *kind,
            n: *n,
            rounds,
            cap: budget.cap,
        })
        .collect()
}

/// Whether `kind` is known to wait out timeouts or hang on a black-holed
/// node, and so gets the slow budget of (d).
fn slow_on_a_hole(kind: Kind) -> bool {
    matches!(kind, Kind::Rslock | Kind::Redlock)
}

/// (d): the healthy five (`proxies`, at `urls`) against five with one
/// black-holed, every kind in the same rounds; returns the healthy and the
/// holed series.
///
/// The fifth node also gets a second proxy; clients of the holed set
/// connect through it while it is healthy, then it goes silent, as a node
/// does when the network path to it fails.
async fn hole_rounds(
    nodes: &Nodes,
    proxies: Vec<Proxy>,
    urls: &[String],
    rounds: usize,
    budgets: &Budgets,
) -> (Vec<Series>, Vec<Series>) {
    let hole = nodes.proxy(4, LATENCY);
    let holed_urls: Vec<String> = urls[..4].iter().cloned().chain([hole.url()]).collect();
    let mut healthy_clients = Vec::new();
    let mut holed_clients = Vec::new();
    for kind in KINDS_D {
        healthy_clients.push(Contender::connect(kind, urls).await);
        holed_clients.push(Contender::connect(kind, &holed_urls).await);
    }
    hole.black_hole();
    let holed_budget = |kind| {
        if slow_on_a_hole(kind) {
            budgets.holed_slow
        } else {
            budgets.holed_fast
        }
    };
    let mut entries = Vec::new();
    for (i, kind) in KINDS_D.into_iter().enumerate() {
        entries.push(Entry {
            name: format!("d:healthy:{kind:?}"),
            contender: &healthy_clients[i],
            budget: budgets.healthy,
        });
        entries.push(Entry {
            name: format!("d:holed:{kind:?}"),
            contender: &holed_clients[i],
            budget: holed_budget(kind),
        });
    }
    let mut results = rounds::alternate(&entries, rounds).await.into_iter();
    let (mut healthy, mut holed) = (Vec::new(), Vec::new());
    for kind in KINDS_D {
        let (h, b) = (results.next().expect("healthy"), results.next().expect("holed"));
        healthy.push(Series {
            kind,
            n: 5,
            rounds: h,
            cap: budgets.healthy.cap,
        });
        holed.push(Series {
            kind,
            n: 5,
            rounds: b,
            cap: holed_budget(kind).cap,
        });
    }
    eprintln!("  (d) done");
    // Dropping the proxies cuts their connections, which frees a redlock
    // thread stuck on the black hole.
    drop(hole);
    drop(proxies);
    (healthy, holed)
}

/// p50 of 50 `PING`s over one connection to `url` (µs).
async fn ping(url: &str) -> Option<f64> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let mut samples = Vec::new();
    for _ in 0..50 {
        let started = tokio::time::Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
        samples.push(started.elapsed());
    }
    crate::stats::quantile_us(&samples, 0.5)
}
