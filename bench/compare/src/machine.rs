//! What the numbers were measured on: machine, versions, date, command.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Facts about this run, for the report header.
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub redis: String,
    /// `etcd --version`, its first line.
    pub etcd: String,
    /// The Debian package's version: the server has no version flag.
    pub zookeeper: String,
    pub rustc: String,
    /// `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
    pub command: String,
    /// Crate versions from the workspace's Cargo.lock: (name, versions).
    pub crates: Vec<(String, String)>,
    /// `/proc/loadavg` (1, 5, 15 min) at the start and at the end.
    pub load_before: String,
    pub load_after: String,
    /// Wall-clock time of the whole run.
    pub duration_s: f64,
}

impl Machine {
    pub fn collect(load_before: String, duration_s: f64) -> Machine {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let profile = if cfg!(debug_assertions) { "" } else { " --release" };
        let command = format!("cargo run -p quorumlock-compare{profile} -- {}", args.join(" "));
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model: std::fs::read_to_string("/proc/cpuinfo")
                .unwrap_or_default()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("model name")
                        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
                })
                .unwrap_or_else(|| "unknown".into()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |k| k.trim().to_owned()),
            redis: output("redis-server", &["--version"]),
            etcd: output("etcd", &["--version"])
                .lines()
                .next()
                .map_or("unknown".into(), |l| {
                    l.trim_start_matches("etcd Version: ").to_owned()
                }),
            zookeeper: output("dpkg-query", &["-W", "-f", "${Version}", "zookeeper"]),
            rustc: output("rustc", &["--version"]),
            date: utc_now(),
            command: command.trim_end().to_owned(),
            crates: ["redis", "rslock", "redlock", "tokio"]
                .iter()
                .map(|name| (name.to_string(), locked_versions(name)))
                .collect(),
            load_before,
            load_after: load_average(),
            duration_s,
        }
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The versions of `name` in the workspace's Cargo.lock, e.g. `1.8.1, 0.23.0`.
fn locked_versions(name: &str) -> String {
    let lock = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock");
    let text = std::fs::read_to_string(lock).unwrap_or_default();
    let wanted = format!("name = \"{name}\"");
    let mut lines = text.lines();
    let mut versions = Vec::new();
    while let Some(line) = lines.next() {
        if line == wanted
            && let Some(version) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            versions.push(version.trim_end_matches('"').to_owned());
        }
    }
    if versions.is_empty() {
        "unknown".into()
    } else {
        versions.join(", ")
    }
}

/// Now as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// The proleptic Gregorian date of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }
}
