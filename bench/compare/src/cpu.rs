//! CPU time of processes, from Linux's /proc (clock ticks of 10 ms).

use std::time::Duration;

/// User + system CPU time of this process so far.
pub fn this_process() -> Duration {
    of("/proc/self/stat")
}

/// User + system CPU time of process `pid` so far (zero when unknown).
pub fn process(pid: Option<u32>) -> Duration {
    pid.map_or(Duration::ZERO, |pid| of(&format!("/proc/{pid}/stat")))
}

fn of(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The fields after the command name (in parentheses, which may hold
    // spaces): utime and stime are the 12th and 13th of them.
    let Some(after) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
