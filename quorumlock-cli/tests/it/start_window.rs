//! `quorumlock run` never starts its command on a lock whose validity ran
//! out between taking the lock and the exec, whatever held quorumlock up
//! there, and its own stderr never holds up the start or the renewals.
//! Through the built binary, against real redis-server nodes; the stall
//! comes at a known step (quorumlock stops itself there, see
//! `quorumlock_testkit::stall`), with a second holder taking the lapsed lock
//! meanwhile.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use quorumlock_testkit::cli::{Binary, Running, exit, scratch, wait_until};
use quorumlock_testkit::stall::{self, StallAt};
use quorumlock_testkit::{RedisServer, start_nodes};

const QUORUMLOCK: Binary = Binary::new(env!("CARGO_BIN_EXE_quorumlock"));

/// The lock's ttl in the stall tests: short, so that 50 tries stay quick,
/// and long next to a loaded machine's scheduling delays (the run's own
/// steps before the stall take a few milliseconds).
const TTL: &str = "800ms";

/// Per-node timeout: generous for a loaded machine, well inside the ttl.
const NODE_TIMEOUT: &str = "200ms";

/// Tries per stall test, as many at a time as [`PARALLEL`].
const TRIES: usize = 50;
const PARALLEL: usize = 5;

/// Bound for anything a run must do soon: reach its stall, exit, write.
const LIMIT: Duration = Duration::from_secs(15);

/// How long the second holder may wait for the stalled run's lock: its
/// keys expire a ttl after they were set.
const SECOND_WAIT: &str = "10s";

/// `quorumlock run ARGS` over `nodes`, with the test's node timeout.
fn run(nodes: &[RedisServer], args: &[&str]) -> Command {
    let mut cmd = QUORUMLOCK.command(nodes);
    cmd.arg("run")
        .args(["--node-timeout", NODE_TIMEOUT])
        .args(args)
        .stdout(Stdio::null());
    cmd
}

/// A shell command that ignores SIGTERM, writes the monotonic-enough wall
/// time in nanoseconds to `started`, sleeps `secs`, then writes `ended`.
fn marking(started: &Path, ended: &Path, secs: f64) -> String {
    format!(
        "trap '' TERM; date +%s%N > {}; sleep {secs}; date +%s%N > {}",
        started.display(),
        ended.display()
    )
}

fn nanos(path: &Path) -> Option<u128> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Waits until `condition` holds, at most [`LIMIT`].
fn within_limit(what: &str, condition: impl FnMut() -> bool) {
    assert!(wait_until(LIMIT, condition), "{what}: not within {LIMIT:?}");
}

/// The pid of the child of `parent` that is stopped, if any.
fn stopped_child(parent: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .find(|pid| stall::is_stopped(*pid))
}

/// One try: a run that stalls at `at` right after taking the lock, a second
/// run that takes the lock once it lapsed, and then the first continued.
/// The first command must never have started; the first run exits 79.
fn stalled_run_never_starts_its_command(nodes: &[RedisServer], dir: &Path, at: StallAt, i: usize) {
    let key = format!("start:{at:?}:{i}");
    let (first_started, first_ended) = (dir.join(format!("first-{i}")), dir.join(format!("first-end-{i}")));
    let (second_started, second_ended) = (
        dir.join(format!("second-{i}")),
        dir.join(format!("second-end-{i}")),
    );
    let mut first = run(nodes, &["--key", &key, "--ttl", TTL, "--wait", "0", "--"]);
    first.args(["sh", "-c", &marking(&first_started, &first_ended, 0.5)]);
    first.envs(stall::env(at));
    let mut first = Running::spawn(first);
    let pid = first.pid();
    within_limit("the first run stalls", || match at {
        StallAt::Fork => stall::is_stopped(pid),
        StallAt::Exec => stopped_child(pid).is_some(),
    });

    let mut second = run(nodes, &["--key", &key, "--ttl", TTL, "--wait", SECOND_WAIT, "--"]);
    second.args(["sh", "-c", &marking(&second_started, &second_ended, 0.0)]);
    let mut second = Running::spawn(second);
    let status = second.wait(LIMIT);
    assert!(status.success(), "second run: {status}: {}", second.stderr());
    if at == StallAt::Fork {
        // Continued only after the second holder ran.
        first.signal("CONT");
    }
    // At Exec, the command's process stays stopped until the guardian kills it.
    let status = first.wait(LIMIT);
    let stderr = first.stderr();
    assert_eq!(
        nanos(&first_started),
        None,
        "try {i}: the first command started on a lapsed lock (the second ran from {:?} to {:?}); \
         the first run said: {stderr}",
        nanos(&second_started),
        nanos(&second_ended),
    );
    assert_eq!(status.code(), Some(exit::LOST), "try {i}: {stderr}");
    // At Exec the guardian killed the command's process before its exec;
    // quorumlock reports the lapse as the guardian's kill or its own loss
    // signal, whichever it sees first.
    let expected = match at {
        StallAt::Fork => "the command did not run",
        StallAt::Exec => "the command was terminated",
    };
    assert!(stderr.contains(expected), "try {i}: {stderr}");
}

fn stalls_never_start_the_command(name: &str, at: StallAt) {
    let nodes = start_nodes(3);
    let dir = scratch(name);
    std::thread::scope(|scope| {
        for lane in 0..PARALLEL {
            let (nodes, dir) = (&nodes, &dir);
            scope.spawn(move || {
                for i in (lane..TRIES).step_by(PARALLEL) {
                    stalled_run_never_starts_its_command(nodes, dir, at, i);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_stalled_before_it_forks_the_command_never_starts_it_once_the_lock_lapsed() {
    stalls_never_start_the_command("fork", StallAt::Fork);
}

#[test]
fn a_command_stalled_between_its_start_check_and_exec_is_killed_before_it_runs() {
    stalls_never_start_the_command("exec", StallAt::Exec);
}

/// A pipe whose buffer is full: a write to it blocks until someone reads.
fn full_pipe() -> (std::io::PipeReader, std::io::PipeWriter) {
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let fd = writer.as_raw_fd();
    let set_nonblocking = |on: bool| {
        // SAFETY: fcntl on a descriptor we own, with integer arguments only.
        #[allow(unsafe_code)]
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            let flags = if on {
                flags | libc::O_NONBLOCK
            } else {
                flags & !libc::O_NONBLOCK
            };
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags), 0, "fcntl");
        }
    };
    set_nonblocking(true);
    let chunk = [b'.'; 4096];
    loop {
        match writer.write(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    // The flag belongs to the open pipe, which quorumlock shares: its writes
    // must block, as they would on a pipe nobody reads.
    set_nonblocking(false);
    (reader, writer)
}

#[test]
fn a_full_stderr_pipe_delays_neither_the_start_nor_the_renewals() {
    // Runs 2.5 ttls: only renewals keep the lock that long.
    let (ttl, runs_for) = ("1s", 2.5);
    let nodes = start_nodes(3);
    let dir = scratch("stderr");
    let (first_started, first_ended) = (dir.join("first"), dir.join("first-end"));
    let (second_started, second_ended) = (dir.join("second"), dir.join("second-end"));
    let (reader, writer) = full_pipe();
    let mut first = run(
        &nodes,
        &["-v", "--key", "start:stderr", "--ttl", ttl, "--wait", "0", "--"],
    );
    first.args(["sh", "-c", &marking(&first_started, &first_ended, runs_for)]);
    let mut first = first.stderr(writer).spawn().expect("spawn quorumlock");
    // The command starts while nobody reads quorumlock's stderr.
    within_limit("the first command starts", || nanos(&first_started).is_some());

    let mut second = run(
        &nodes,
        &["--key", "start:stderr", "--ttl", ttl, "--wait", SECOND_WAIT, "--"],
    );
    second.args(["sh", "-c", &marking(&second_started, &second_ended, 0.0)]);
    let mut second = Running::spawn(second);
    let status = second.wait(LIMIT);
    assert!(status.success(), "second run: {status}: {}", second.stderr());
    let mut first_status = None;
    within_limit("the first run exits", || {
        first_status = first.try_wait().expect("try_wait");
        first_status.is_some()
    });
    // Read only now: everything quorumlock could not write was dropped.
    drop(reader);
    let (first_ended, second_started) = (nanos(&first_ended), nanos(&second_started));
    assert_eq!(
        first_status.and_then(|s| s.code()),
        Some(0),
        "the first run kept its lock through renewals with stderr full"
    );
    assert!(
        first_ended.is_some_and(|end| second_started.is_some_and(|start| start > end)),
        "the second command started at {second_started:?}, before the first ended at {first_ended:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// CLOCK_MONOTONIC now, in nanoseconds (the clock of the guardian's deadlines).
fn mono_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    u64::try_from(now.tv_sec).expect("secs") * 1_000_000_000 + u64::try_from(now.tv_nsec).expect("nanos")
}

/// A guardian message: kind and value, little-endian (`Kind` in run/guardian.rs).
fn message(kind: u64, value: u64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&kind.to_le_bytes());
    bytes[8..].copy_from_slice(&value.to_le_bytes());
    bytes
}

#[test]
fn a_group_announced_after_the_deadline_is_killed_at_once() {
    const GROUP: u64 = 1;
    const DEADLINE: u64 = 2;
    // The guardian's exit status when it killed for a passed deadline.
    const DEADLINE_PASSED: i32 = 2;
    const PAST_DEADLINE_NS: u64 = 300_000_000;
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    let mut guardian = QUORUMLOCK
        .command(&[])
        .arg("__guardian")
        .stdin(reader)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the guardian");
    let deadline = mono_now_ns() + 20_000_000;
    writer
        .write_all(&message(DEADLINE, deadline))
        .expect("send the deadline");
    // A command that quorumlock starts only after the deadline passed (its
    // own process group, as `run` gives it).
    let mut late = {
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .expect("spawn sleep")
    };
    // Long past the deadline: a guardian that exits on it has done so.
    within_limit("the deadline is long past", || {
        mono_now_ns() > deadline + PAST_DEADLINE_NS
    });
    assert!(
        guardian.try_wait().expect("try_wait").is_none(),
        "the guardian waits for a group after the deadline instead of exiting"
    );
    writer
        .write_all(&message(GROUP, u64::from(late.id())))
        .expect("announce the group");
    let mut killed = None;
    within_limit("the late group is killed", || {
        killed = late.try_wait().expect("try_wait");
        killed.is_some()
    });
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(killed.and_then(|s| s.signal()), Some(libc::SIGKILL));
    let mut exited = None;
    within_limit("the guardian exits", || {
        exited = guardian.try_wait().expect("try_wait");
        exited.is_some()
    });
    assert_eq!(exited.and_then(|s| s.code()), Some(DEADLINE_PASSED));
}
