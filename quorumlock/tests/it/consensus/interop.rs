//! Sharing a lock with the store's own lock client (`etcdctl lock`,
//! python's kazoo): each side sees the other's entries in one line, so a
//! fleet can mix them. The store's module gives the other client; the
//! contest and its check are here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::store::{Space, Store};
use super::{TTL, ms};

/// Rounds of each contender.
pub const ROUNDS: usize = 4;

/// How long each holder stays inside.
pub const INSIDE: Duration = Duration::from_millis(150);

/// The wall clock in ns, as the other client's lines give it.
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// Intervals `(start, end)` from the lines `start NS` / `end NS`.
fn intervals(text: &str) -> Vec<(u128, u128)> {
    let numbers: Vec<u128> = text
        .lines()
        .map(|line| {
            line.split_whitespace()
                .nth(1)
                .expect("a time")
                .parse()
                .expect("ns")
        })
        .collect();
    numbers.chunks(2).map(|pair| (pair[0], pair[1])).collect()
}

/// Two quorumlock contenders and another client take `resource` of
/// `space` [`ROUNDS`] times each, [`INSIDE`] per hold; asserts that every
/// round of the other client ran, that no two holds overlapped, and that
/// nothing was left in the line. The other client is the processes that
/// `other` gives for a file, run one after the other on a thread of their
/// own: each appends `start NS` and `end NS` (wall clock) of its holds to
/// that file.
pub async fn quorumlock_and_another_client_exclude_each_other<S: Store>(
    space: &Space<S>,
    resource: &'static str,
    other: impl FnOnce(&Path) -> Vec<Command> + Send + 'static,
) {
    let dir = std::env::temp_dir().join(format!(
        "quorumlock-{}-interop-{}-{}",
        S::SCHEME,
        std::process::id(),
        space.name()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("other.log");
    let other = {
        let file = file.clone();
        std::thread::spawn(move || {
            for mut process in other(&file) {
                let status = process.status().expect("the other client runs");
                assert!(status.success(), "{process:?} failed: {status}");
            }
        })
    };
    let ours = Arc::new(Mutex::new(Vec::new()));
    let contenders: Vec<_> = (0..2)
        .map(|_| {
            let (redlock, ours) = (space.client(), Arc::clone(&ours));
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = redlock.lock(resource, TTL).await.expect("taken");
                    let start = now_ns();
                    tokio::time::sleep(INSIDE).await;
                    assert!(guard.is_held());
                    ours.lock().unwrap().push((start, now_ns()));
                    guard.release().await.unwrap();
                    tokio::time::sleep(ms(20)).await;
                }
            })
        })
        .collect();
    for contender in contenders {
        contender.await.unwrap();
    }
    other.join().unwrap();
    let mut all = intervals(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(all.len(), ROUNDS, "every round of the other client held the lock");
    all.extend(ours.lock().unwrap().iter().copied());
    all.sort_unstable();
    let overlap = all.windows(2).find(|pair| pair[0].1 > pair[1].0);
    assert!(overlap.is_none(), "two holders at once: {overlap:?}");
    let line = space.line(resource);
    assert!(line.is_empty(), "{line:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
