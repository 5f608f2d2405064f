//! `quorumlock run --min-hold`: the same short job started from every
//! machine's crontab within a second runs once, because the lock outlives
//! the job for longer than the others wait.

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock_testkit::cli::{Binary, exit, scratch};
use quorumlock_testkit::{RedisServer, get, leftovers, pttl, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));
const KEY: &str = "cron:once";

/// When each of the five runs starts, after the first: all within a second,
/// as cron on machines whose clocks differ by a little.
const OFFSETS_MS: [u64; 5] = [0, 230, 470, 610, 940];
const MIN_HOLD: Duration = Duration::from_secs(5);

fn run(nodes: &[RedisServer], job: &str) -> Child {
    QUORUMLOCK
        .command(nodes)
        .args([
            "run",
            "--key",
            KEY,
            "--wait",
            "3s",
            "--min-hold",
            "5s",
            "--node-timeout",
            "500ms",
            "-v",
            "--",
            "sh",
            "-c",
            job,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock run")
}

/// The first of `runs` to exit: its index and output (taken out of `runs`).
fn first_to_exit(runs: &mut [Option<Child>], first_start: Instant) -> (usize, Output) {
    loop {
        for (i, slot) in runs.iter_mut().enumerate() {
            if let Some(child) = slot
                && child.try_wait().expect("try_wait").is_some()
            {
                let output = slot.take().expect("present").wait_with_output().expect("output");
                return (i, output);
            }
        }
        assert!(first_start.elapsed() < Duration::from_secs(20), "no run finished");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_job_started_everywhere_within_a_second_runs_once_per_min_hold() {
    let nodes = start_nodes(3);
    let dir = scratch("min-hold");
    let log = dir.join("log");
    // 50 ms of work, as a short cron job.
    let job = format!("echo \"$$\" >> {}; sleep 0.05", log.display());

    let first_start = Instant::now();
    let mut runs: Vec<Option<Child>> = Vec::new();
    for offset in OFFSETS_MS {
        let at = first_start + Duration::from_millis(offset);
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        runs.push(Some(run(&nodes, &job)));
    }

    // The first run to exit is the one that ran the job: the others wait
    // (3 s) for a lock that stays taken for 5 s.
    let (winner, output) = first_to_exit(&mut runs, first_start);
    let ended = Instant::now();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "run {winner}: {stderr}");
    assert!(stderr.contains("until its minimum hold passes"), "{stderr}");

    // Right after the job and its run ended, the key is still there on
    // every node, set to expire at the min hold (not at the 30 s ttl).
    for node in &nodes {
        let left = pttl(node, KEY);
        assert!(
            get(node, KEY).is_some() && left > 0 && left <= MIN_HOLD.as_millis() as i64,
            "kept key on every node: {}",
            leftovers(node)
        );
    }

    for (i, slot) in runs.iter_mut().enumerate() {
        let Some(child) = slot.take() else { continue };
        let output = child.wait_with_output().expect("output");
        assert_eq!(
            output.status.code(),
            Some(exit::BUSY),
            "run {i} gave up waiting: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let lines = std::fs::read_to_string(&log).expect("the job ran");
    assert_eq!(lines.lines().count(), 1, "the job ran exactly once: {lines:?}");

    // The key expires at the min hold counted from the winner's acquisition:
    // not before it was spawned plus the min hold, nor after it ended plus
    // the min hold. Then the next period's run takes the lock.
    let earliest_gone = first_start + Duration::from_millis(OFFSETS_MS[winner]) + MIN_HOLD;
    let gone_by = ended + MIN_HOLD;
    while nodes.iter().any(|node| get(node, KEY).is_some()) {
        assert!(
            Instant::now() < gone_by + Duration::from_secs(2),
            "the key outlived the min hold: {:?}",
            nodes.iter().map(leftovers).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        Instant::now() + Duration::from_millis(100) >= earliest_gone,
        "the key expired {:?} before the min hold",
        earliest_gone - Instant::now()
    );
    let next = run(&nodes, &job).wait_with_output().expect("next run");
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    let lines = std::fs::read_to_string(&log).expect("log");
    assert_eq!(lines.lines().count(), 2, "the next period's run ran: {lines:?}");
}
