//! `quorumlock run --fenced` through the built binary: the command gets its
//! lock's key, token and fencing token, and the example job's SQL write
//! guarded by `WHERE fence < :token` refuses a job whose lock was taken
//! over by a later holder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use quorumlock_testkit::cli::{Binary, scratch, wait_for_line};
use quorumlock_testkit::{RedisServer, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));
const KEY: &str = "ledger";
/// The example job's exit status when its write was refused.
const REFUSED: i32 = 3;
/// A ttl far longer than the test: the stale holder's own renewals (every
/// ttl/3) must not notice the loss and stop its command before it writes.
const TTL: &str = "60s";
/// How long the test waits for a file a job writes, at most.
const FILE_WAIT: Duration = Duration::from_secs(20);

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fenced_job.sh")
}

fn sqlite3_present() {
    let found = Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "sqlite3 is not installed (scripts/ensure-redis.sh installs it)"
    );
}

/// `quorumlock run --key ledger [--fenced] -- sh -c SCRIPT`.
fn run(nodes: &[RedisServer], fenced: bool, script: &str) -> Child {
    let mut cmd = QUORUMLOCK.command(nodes);
    cmd.args(["run", "--key", KEY, "--ttl", TTL, "--wait", "10s"]);
    if fenced {
        cmd.arg("--fenced");
    }
    cmd.args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock run")
}

fn finished(child: Child) -> Output {
    child.wait_with_output().expect("wait for quorumlock run")
}

fn ledger(db: &Path) -> (i64, u64) {
    let out = Command::new("sqlite3")
        .args(["-batch", "-separator", " "])
        .arg(db)
        .arg("SELECT balance, fence FROM ledger WHERE id = 1")
        .output()
        .expect("sqlite3");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut parts = text.split_whitespace();
    let balance = parts
        .next()
        .expect("balance")
        .parse()
        .expect("balance is a number");
    let fence = parts.next().expect("fence").parse().expect("fence is a number");
    (balance, fence)
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

#[test]
fn the_command_gets_the_key_the_lock_token_and_the_fencing_token() {
    let nodes = start_nodes(3);
    let dir = scratch("fenced-env");
    let seen = dir.join("env");
    let script = format!(
        "printf '%s %s %s\\n' \"$QUORUMLOCK_KEY\" \"$QUORUMLOCK_LOCK_TOKEN\" \"${{QUORUMLOCK_FENCE_TOKEN-unset}}\" > {}",
        shell_quote(&seen)
    );
    let out = finished(run(&nodes, true, &script));
    assert!(
        out.status.success(),
        "fenced run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&seen).expect("the command wrote its environment");
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{text:?}");
    assert_eq!(fields[0], KEY);
    assert!(
        fields[1].len() >= 32 && fields[1].chars().all(|c| c.is_ascii_hexdigit()),
        "{text:?}"
    );
    let fence: u64 = fields[2].parse().expect("the fencing token is a number");
    assert!(fence > 0);

    // Without --fenced the command has no fencing token, even when the
    // caller's environment had one (a run nested inside a fenced run).
    let out = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", KEY, "--", "sh", "-c"])
        .arg(format!(
            "echo \"${{QUORUMLOCK_FENCE_TOKEN-unset}}\" > {}",
            shell_quote(&seen)
        ))
        .env("QUORUMLOCK_FENCE_TOKEN", "12345")
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&seen).expect("written").trim(), "unset");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stale_jobs_write_is_refused_by_the_fence() {
    sqlite3_present();
    let nodes = start_nodes(3);
    let dir = scratch("fenced-stale");
    let db = dir.join("ledger.db");
    let job = |amount: i64| format!("sh {} {} {amount}", shell_quote(&example()), shell_quote(&db));

    // A first holder posts 25.
    let out = finished(run(&nodes, true, &job(25)));
    assert!(
        out.status.success(),
        "first job: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (balance, first_fence) = ledger(&db);
    assert_eq!(balance, 25);

    // The stale job: it holds the lock and is about to write, but stalls
    // (until the test creates `go`). Meanwhile an operator clears its lock
    // and a later holder takes the lock and posts 40.
    let ready = dir.join("ready");
    let go = dir.join("go");
    let stale = run(
        &nodes,
        true,
        &format!(
            "echo \"$QUORUMLOCK_FENCE_TOKEN\" > {ready}; while [ ! -e {go} ]; do sleep 0.01; done; {job}",
            ready = shell_quote(&ready),
            go = shell_quote(&go),
            job = job(1000),
        ),
    );
    let stale_fence: u64 = wait_for_line(&ready, FILE_WAIT).parse().expect("a number");
    assert!(stale_fence > first_fence, "{stale_fence} after {first_fence}");

    let cleared = QUORUMLOCK
        .command(&nodes)
        .args(["unlock", KEY, "--force", "--yes"])
        .output()
        .expect("unlock");
    assert!(
        cleared.status.success(),
        "unlock: {}",
        String::from_utf8_lossy(&cleared.stderr)
    );

    let later = finished(run(&nodes, true, &job(40)));
    assert!(
        later.status.success(),
        "later job: {}",
        String::from_utf8_lossy(&later.stderr)
    );
    let (balance, later_fence) = ledger(&db);
    assert_eq!(balance, 65);
    assert!(later_fence > stale_fence, "{later_fence} after {stale_fence}");

    // The stale job wakes up and writes with its older token: refused.
    std::fs::write(&go, "").expect("go");
    let out = finished(stale);
    assert_eq!(
        out.status.code(),
        Some(REFUSED),
        "the stale job's exit status is passed on; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ledger(&db), (65, later_fence), "the stale write changed nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_example_job_refuses_to_run_without_a_fencing_token() {
    sqlite3_present();
    let dir = scratch("fenced-missing");
    let db = dir.join("ledger.db");
    let out = Command::new("sh")
        .arg(example())
        .arg(&db)
        .arg("5")
        .env_remove("QUORUMLOCK_FENCE_TOKEN")
        .output()
        .expect("sh");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fenced"));
    assert!(!db.exists(), "no write without a token");
    let _ = std::fs::remove_dir_all(&dir);
}
