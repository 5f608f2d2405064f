//! Inventory deduction, the high-safety case: B buyers (each with its own
//! client, as separate processes would be) sell S units of one SKU.
//!
//! Every order carries its own idempotency key (a retried order is not sold
//! twice); each buyer takes the fenced quorum lock on the SKU and deducts one
//! unit with a fenced write, which the stock refuses from a holder whose lock
//! was taken over. With `--restart`, all lock nodes are restarted without
//! persistence mid-run (the known-unsafe case: two buyers can hold the lock
//! at once) and the stock still never oversells.
//!
//! ```sh
//! cargo run --example inventory                  # 5 lock nodes, 8 buyers, 40 units
//! cargo run --example inventory -- --restart     # the unsafe case, fenced
//! cargo run --example inventory -- --short       # what CI runs
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use quorumlock::{ConfigError, Error, Fenced, FencedWrite, Redlock, Setting};

use quorumlock_testkit::server;

use server::RedisServer;

const SKU: &str = "sku:tea-42";
const STOCK_KEY: &str = "stock:tea-42";

#[derive(Default)]
struct Tally {
    accepted: AtomicUsize,
    sold_out: AtomicUsize,
    stale: AtomicUsize,
    retried: AtomicUsize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let short = args.iter().any(|a| a == "--short");
    let restart = args.iter().any(|a| a == "--restart");
    let (buyers, stock) = if short { (4, 10) } else { (8, 40) };

    let mut lock_nodes: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let store_node = RedisServer::start();
    let mut store = redis::Client::open(store_node.url())?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("SET")
        .arg(STOCK_KEY)
        .arg(stock)
        .query_async::<()>(&mut store)
        .await?;
    let urls: Vec<String> = lock_nodes.iter().map(RedisServer::url).collect();
    println!(
        "{buyers} buyers, {stock} units, 5 lock nodes{}",
        if restart {
            ", restarts without persistence"
        } else {
            ""
        }
    );

    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for buyer in 0..buyers {
        let redlock = Redlock::builder()
            .nodes(urls.clone())
            .retry_delay(Duration::from_millis(10))
            .build()?;
        let redlock = redlock.with_options(redlock.options().fenced(true))?;
        let (tally, store) = (Arc::clone(&tally), store.clone());
        tasks.push(tokio::spawn(async move {
            let orders = redlock.idempotency();
            for order in 0.. {
                // A failed order is retried under the same idempotency key:
                // a retry can never sell a second unit for one order.
                let key = format!("order:{buyer}:{order}");
                for _attempt in 0..3 {
                    let outcome = orders
                        .run_string(&key, Duration::from_secs(10), || {
                            buy(&redlock, store.clone(), &tally)
                        })
                        .await;
                    match outcome.as_deref() {
                        Ok("sold") => break,
                        Ok(_) => return, // sold out
                        Err(_) => tally.retried.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }
        }));
    }
    if restart {
        tokio::time::sleep(Duration::from_millis(30)).await;
        for node in &mut lock_nodes {
            node.restart();
        }
        println!("  ! restarted all lock nodes without their data");
    }
    for task in tasks {
        task.await?;
    }

    let left: i64 = redis::cmd("GET").arg(STOCK_KEY).query_async(&mut store).await?;
    let accepted = tally.accepted.load(Ordering::Relaxed) as i64;
    println!();
    println!(
        "| orders accepted | stock left | stale writes rejected | sold-out answers | retried attempts |"
    );
    println!("|---:|---:|---:|---:|---:|");
    println!(
        "| {accepted} | {left} | {} | {} | {} |",
        tally.stale.load(Ordering::Relaxed),
        tally.sold_out.load(Ordering::Relaxed),
        tally.retried.load(Ordering::Relaxed)
    );
    assert!(left >= 0, "stock went negative");
    assert_eq!(accepted + left, stock, "every unit sold exactly once");
    println!("\nstock never negative; accepted + left == {stock}");
    Ok(())
}

/// One order: lock the SKU, deduct one unit with a fenced write.
async fn buy(
    redlock: &Redlock,
    mut store: redis::aio::MultiplexedConnection,
    tally: &Tally,
) -> Result<String, Error> {
    let guard = redlock.lock(SKU, Duration::from_secs(5)).await?;
    let token = guard.fence_token().expect("fenced client");
    let outcome = FencedWrite::new(SKU, token)
        .incr_by(&mut store, STOCK_KEY, -1, 0)
        .await;
    guard.release().await.ok();
    match outcome? {
        Fenced::Applied(_) => {
            tally.accepted.fetch_add(1, Ordering::Relaxed);
            Ok("sold".into())
        }
        Fenced::BelowMin { .. } => {
            tally.sold_out.fetch_add(1, Ordering::Relaxed);
            Ok("sold out".into())
        }
        Fenced::Stale { seen } => {
            tally.stale.fetch_add(1, Ordering::Relaxed);
            Err(Error::Lost {
                confirmed: 0,
                quorum: redlock.quorum(),
                nodes: redlock.nodes(),
            })
            .inspect_err(|_| tracing::debug!(seen, "stale write refused"))
        }
        _ => Err(Error::Config(ConfigError::new(
            Setting::FencedWrite,
            "unexpected fenced-write outcome",
        ))),
    }
}
