//! `quorumlock run --metrics-file`: the file a textfile collector reads has
//! the run's outcome, exit status and timings next to the library's own
//! counts, whatever the ending (the command's status, a busy lock), and is
//! replaced by a rename, never rewritten in place. Through the built
//! binary, against real redis-server nodes.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock_testkit::cli::{Binary, exit, scratch, text, wait_child, wait_for_line};
use quorumlock_testkit::{dbsize, set_foreign, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// One line of the text format: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of a file in the Prometheus text format (comments skipped).
/// Label values here hold no `,` or `"`, so a plain split reads them.
fn parse(file: &str) -> Vec<Sample> {
    file.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("label=\"value\"");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().expect("a number"),
            }
        })
        .collect()
}

/// The value of the one sample named `name` that has every label of
/// `labels`; None when there is no such sample.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = samples.iter().filter(|s| {
        s.name == name
            && labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
    });
    let sample = found.next()?;
    assert!(found.next().is_none(), "{name} {labels:?} more than once");
    Some(sample.value)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// The names of the files in `dir`.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read the directory")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_run_that_succeeds_writes_ok_its_timings_and_the_library_counts() {
    let nodes = start_nodes(3);
    let dir = scratch("metrics-ok");
    let path = dir.join("nightly.prom");
    let before = unix_now();
    let out = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:metrics-secret-key", "--metrics-file"])
        .arg(&path)
        .args(["--metrics-job", "nightly", "--", "sh", "-c", "sleep 0.3"])
        .output()
        .expect("run quorumlock");
    let after = unix_now();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let file = fs::read_to_string(&path).expect("the metrics file");
    let samples = parse(&file);

    assert_eq!(
        value(&samples, "quorumlock_run_outcome", &[("outcome", "ok")]),
        Some(1.0),
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_exit_code", &[]),
        Some(0.0),
        "{file}"
    );
    let acquired = [("call", "lock"), ("outcome", "acquired")];
    assert_eq!(
        value(&samples, "quorumlock_acquisitions_total", &acquired),
        Some(1.0),
        "{file}"
    );
    let wait = value(&samples, "quorumlock_run_wait_seconds", &[]).expect("wait");
    let held = value(&samples, "quorumlock_run_held_seconds", &[]).expect("held");
    let command = value(&samples, "quorumlock_run_command_seconds", &[]).expect("command");
    // The command slept 0.3 s under the lock, as its own clock measured it:
    // quorumlock's measure from the spawn to the exit can come out a little
    // shorter. The wait (connections and one attempt) has no bound on a
    // loaded machine.
    assert!(
        wait > 0.0 && command >= 0.25 && held >= command,
        "wait {wait}, held {held}, command {command}: {file}"
    );
    assert!(after - before >= wait + held, "{file}");
    let last = value(&samples, "quorumlock_run_last_timestamp_seconds", &[]).expect("last");
    assert!(before <= last && last <= after, "{before} <= {last} <= {after}");

    // Every line has the job label, none names the key.
    assert!(
        samples
            .iter()
            .all(|s| s.labels.contains(&("job".into(), "nightly".into()))),
        "{file}"
    );
    assert!(
        !file.contains("metrics-secret-key") && !file.contains("key="),
        "{file}"
    );
    assert_eq!(listing(&dir), ["nightly.prom"], "nothing left beside the file");
    assert_eq!(dbsize(&nodes[0]), 0, "the run released its lock");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_busy_lock_is_recorded_as_busy_without_hold_or_command_times() {
    let nodes = start_nodes(3);
    for node in &nodes {
        set_foreign(node, "cli:metrics-busy", "someone-else", 60_000);
    }
    let dir = scratch("metrics-busy");
    let path = dir.join("busy.prom");
    let out = QUORUMLOCK
        .command(&nodes)
        .args([
            "run",
            "--key",
            "cli:metrics-busy",
            "--wait",
            "0",
            "--metrics-file",
        ])
        .arg(&path)
        .args(["--", "true"])
        .output()
        .expect("run quorumlock");
    assert_eq!(
        out.status.code(),
        Some(exit::BUSY),
        "stderr: {}",
        text(&out.stderr)
    );
    let file = fs::read_to_string(&path).expect("the metrics file");
    let samples = parse(&file);

    assert_eq!(
        value(&samples, "quorumlock_run_outcome", &[("outcome", "busy")]),
        Some(1.0),
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_outcome", &[("outcome", "ok")]),
        None,
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_exit_code", &[]),
        Some(75.0),
        "{file}"
    );
    let busy = [("call", "lock"), ("outcome", "busy")];
    assert_eq!(
        value(&samples, "quorumlock_acquisitions_total", &busy),
        Some(1.0),
        "{file}"
    );
    assert!(
        value(&samples, "quorumlock_run_wait_seconds", &[]).is_some(),
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_held_seconds", &[]),
        None,
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_command_seconds", &[]),
        None,
        "{file}"
    );
    assert!(!file.contains("job="), "no job label unless asked: {file}");
    let _ = fs::remove_dir_all(&dir);
}

/// A failing command's status is recorded, and the file of the previous run
/// is replaced by a rename: a hard link to it keeps the old text (a rewrite
/// in place would change it too), and no temporary file is left.
#[test]
fn a_failing_command_is_recorded_and_the_old_file_is_replaced_whole() {
    let nodes = start_nodes(3);
    let dir = scratch("metrics-replace");
    let path = dir.join("job.prom");
    fs::write(&path, "quorumlock_run_exit_code 0\n").expect("an earlier file");
    let earlier = dir.join("earlier");
    fs::hard_link(&path, &earlier).expect("hard link");
    let inode = fs::metadata(&path).expect("metadata").ino();

    let out = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:metrics-fail", "--metrics-file"])
        .arg(&path)
        .args(["--", "sh", "-c", "exit 3"])
        .output()
        .expect("run quorumlock");
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    let file = fs::read_to_string(&path).expect("the metrics file");
    let samples = parse(&file);
    let failed = [("outcome", "command_failed")];
    assert_eq!(
        value(&samples, "quorumlock_run_outcome", &failed),
        Some(1.0),
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_exit_code", &[]),
        Some(3.0),
        "{file}"
    );
    assert!(
        value(&samples, "quorumlock_run_command_seconds", &[]).is_some(),
        "{file}"
    );

    assert_ne!(
        fs::metadata(&path).expect("metadata").ino(),
        inode,
        "renamed over"
    );
    assert_eq!(
        fs::read_to_string(&earlier).expect("link"),
        "quorumlock_run_exit_code 0\n"
    );
    assert_eq!(listing(&dir), ["earlier", "job.prom"], "no temporary file left");
    let _ = fs::remove_dir_all(&dir);
}

/// A lock lost while the command runs (a majority of nodes killed) ends the
/// run with 79, and the file says `lost`, with the command's time so far.
#[test]
fn a_lost_lock_is_recorded_as_lost() {
    let mut nodes = start_nodes(3);
    let dir = scratch("metrics-lost");
    let (path, started) = (dir.join("lost.prom"), dir.join("started"));
    let script = format!("echo >> {}; exec sleep 60", started.display());
    let mut run = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:metrics-lost", "--ttl", "3s", "--grace", "1s"])
        .args(["--node-timeout", "300ms", "--metrics-file"])
        .arg(&path)
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn run");
    wait_for_line(&started, Duration::from_secs(10));
    nodes[0].kill();
    nodes[1].kill();
    let status = wait_child(&mut run, Duration::from_secs(15));
    assert_eq!(status.code(), Some(exit::LOST));
    let file = fs::read_to_string(&path).expect("the metrics file");
    let samples = parse(&file);
    assert_eq!(
        value(&samples, "quorumlock_run_outcome", &[("outcome", "lost")]),
        Some(1.0),
        "{file}"
    );
    assert_eq!(
        value(&samples, "quorumlock_run_exit_code", &[]),
        Some(79.0),
        "{file}"
    );
    let command = value(&samples, "quorumlock_run_command_seconds", &[]).expect("command");
    let held = value(&samples, "quorumlock_run_held_seconds", &[]).expect("held");
    assert!(command > 0.0 && held >= command, "{file}");
    let _ = fs::remove_dir_all(&dir);
}

/// A file that cannot be written is warned about, and the run's status is
/// the command's all the same.
#[test]
fn an_unwritable_metrics_file_leaves_the_status_alone() {
    let nodes = start_nodes(1);
    let out = QUORUMLOCK
        .command(&nodes)
        .args(["run", "--key", "cli:metrics-nowhere"])
        .args(["--metrics-file", "/nonexistent/dir/run.prom", "--", "true"])
        .output()
        .expect("run quorumlock");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("cannot write the metrics file /nonexistent/dir/run.prom"),
        "{stderr}"
    );
}
