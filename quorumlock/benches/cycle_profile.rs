//! One task doing lock+unlock cycles on one local node, for a profiler:
//! quorumlock's `try_lock` + `release`, or (`raw`) the least a cycle can
//! cost, `SET NX PX` and the owner-checked release script sent with the
//! redis crate directly. It prints nothing; run it under a tool that counts,
//! for instance instructions per cycle, which do not depend on how busy the
//! machine is:
//!
//! ```sh
//! cargo bench -p quorumlock --bench cycle_profile --no-run   # prints the binary's path
//! valgrind --tool=callgrind target/release/deps/cycle_profile-HASH 5000       # quorumlock
//! valgrind --tool=callgrind target/release/deps/cycle_profile-HASH 5000 raw   # raw
//! valgrind --tool=callgrind target/release/deps/cycle_profile-HASH 5000 fenced   # fenced
//! callgrind_annotate --inclusive=yes callgrind.out.PID | less
//! ```
//!
//! Arguments: the number of cycles (default 20,000; `--smoke`: 20), and
//! `raw`, or `fenced` (quorumlock's fenced locks; prints how many scripts a
//! cycle ran on the node: 2 when each token came with the grant, up to 3
//! when the proposal round ran). The node timeout is long so that a slow profiler does not turn
//! cycles into timeouts.

use std::time::Duration;

use quorumlock::Redlock;
use quorumlock_testkit::server::RedisServer;

const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
const TTL: Duration = Duration::from_secs(10);
/// Long next to a cycle under valgrind (tens of times slower than native).
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let raw = args.iter().any(|a| a == "raw");
    let fenced = args.iter().any(|a| a == "fenced");
    let cycles = args
        .iter()
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(if smoke { 20 } else { 20_000 });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    runtime.block_on(async {
        if raw {
            raw_cycles(&server, cycles).await;
        } else {
            let redlock = Redlock::builder()
                .nodes([server.url()])
                .node_timeout(NODE_TIMEOUT)
                .build()
                .unwrap();
            let redlock = redlock.with_options(redlock.options().fenced(fenced)).unwrap();
            for i in 0..cycles {
                let guard = redlock.try_lock(format!("p:{i}"), TTL).await.unwrap().unwrap();
                guard.release().await.unwrap();
            }
        }
    });
    if fenced {
        // How many cycles took the proposal round (a third script): under a
        // profiler a request may arrive later than the proposal's lead.
        let scripts = quorumlock_testkit::calls(&server, "evalsha");
        eprintln!("{:.2} scripts per cycle", scripts as f64 / cycles as f64);
    }
}

async fn raw_cycles(server: &RedisServer, cycles: usize) {
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE)
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..cycles {
        let key = format!("p:{i}");
        let token = format!("{:032x}", rand::random::<u128>());
        let mut set = conn.clone();
        let granted: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut set)
            .await
            .unwrap();
        assert!(granted.is_some());
        let mut release = conn.clone();
        let _: i64 = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(&key)
            .arg(&token)
            .query_async(&mut release)
            .await
            .unwrap();
    }
}
