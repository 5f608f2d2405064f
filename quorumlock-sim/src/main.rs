//! The simulator's runner: `quorumlock-sim --seeds A..B [--scenario NAME]
//! [--twice] [--threads N]`. Runs each seed, prints every violation with
//! the command that replays it, shrinks the first failing run (every one
//! with `--shrink`) to a small one that fails the same way, and prints the
//! seeds per minute. `--duration` and `--faults` replay a shrunk run.

use std::ops::Range;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use quorumlock_sim::shrink::shrink;
use quorumlock_sim::{Outcome, Scenario, run};

/// Problems printed per failing seed.
const SHOWN_PROBLEMS: usize = 5;

struct Args {
    seeds: Range<u64>,
    scenario: String,
    twice: bool,
    threads: usize,
    /// Print each run's statistics.
    show: bool,
    /// Shrink every failing run, not only the first.
    shrink_all: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: quorumlock-sim --seeds A..B | --seeds N [--scenario standard|calm|short|busy|expiry|fast] \
         [--duration 5s] [--faults 3,7|none] [--twice] [--threads N] [--show] [--shrink] [--log FILTER]"
    );
    std::process::exit(2)
}

fn parse() -> (Args, Scenario) {
    let mut args = Args {
        seeds: 0..100,
        scenario: "standard".to_owned(),
        twice: false,
        show: false,
        shrink_all: false,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let (mut duration, mut kept_faults) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--seeds" => {
                let text = value();
                args.seeds = match text.split_once("..") {
                    Some((a, b)) => {
                        a.parse().unwrap_or_else(|_| usage())..b.parse().unwrap_or_else(|_| usage())
                    }
                    None => {
                        let seed: u64 = text.parse().unwrap_or_else(|_| usage());
                        seed..seed + 1
                    }
                };
            }
            "--scenario" => args.scenario = value(),
            "--duration" => {
                duration = Some(quorumlock::parse_duration(&value()).unwrap_or_else(|_| usage()));
            }
            "--faults" => kept_faults = Some(fault_list(&value())),
            "--twice" => args.twice = true,
            "--show" => args.show = true,
            "--shrink" => args.shrink_all = true,
            "--log" => {
                tracing_subscriber::fmt()
                    .with_timer(quorumlock_sim::world::SimTime)
                    .with_env_filter(tracing_subscriber::EnvFilter::new(value()))
                    .with_writer(std::io::stderr)
                    .init();
            }
            "--threads" => args.threads = value().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    let Some(mut scenario) = Scenario::named(&args.scenario) else {
        usage()
    };
    scenario.duration = duration.unwrap_or(scenario.duration);
    scenario.kept_faults = kept_faults;
    (args, scenario)
}

/// `3,7` or `none`.
fn fault_list(text: &str) -> Vec<usize> {
    if text == "none" {
        return Vec::new();
    }
    let parsed: Result<Vec<usize>, _> = text.split(',').map(|i| i.trim().parse()).collect();
    parsed.unwrap_or_else(|_| usage())
}

/// The runner's flags that replay `scenario` (named `name`).
fn replay_flags(name: &str, scenario: &Scenario) -> String {
    let mut flags = format!("--scenario {name}");
    if Scenario::named(name).is_none_or(|named| named.duration != scenario.duration) {
        flags.push_str(&format!(" --duration {}ms", scenario.duration.as_millis()));
    }
    if let Some(kept) = &scenario.kept_faults {
        let list: Vec<String> = kept.iter().map(ToString::to_string).collect();
        let list = if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(",")
        };
        flags.push_str(&format!(" --faults {list}"));
    }
    flags
}

/// Shrinks the failing run of `seed` and prints the small run: its faults
/// with their times, what it broke and how to replay it.
fn print_shrunk(seed: u64, name: &str, scenario: &Scenario, failed: &Outcome) {
    let shrunk = shrink(seed, scenario, failed);
    let mut text = format!(
        "seed {seed} shrunk in {} runs to {:?} of workload and {} of {} faults:\n",
        shrunk.runs,
        shrunk.scenario.duration,
        shrunk.outcome.faults.len(),
        failed.faults.len()
    );
    for fault in &shrunk.outcome.faults {
        let until = fault.until.map_or("the end".to_owned(), |t| format!("{t:?}"));
        let drawn = fault.drawn.map_or("-".to_owned(), |i| format!("#{i}"));
        text.push_str(&format!(
            "    {drawn} from {:?} to {until}: {}\n",
            fault.from, fault.what
        ));
    }
    for violation in shrunk.outcome.violations.iter().take(SHOWN_PROBLEMS) {
        text.push_str(&format!("  {violation}\n"));
    }
    text.push_str(&format!(
        "  replay: cargo run --release -p quorumlock-sim -- --seeds {seed} {} --log quorumlock=debug",
        replay_flags(name, &shrunk.scenario)
    ));
    eprintln!("{text}");
}

fn main() -> ExitCode {
    let (args, scenario) = parse();
    let shrunk_one = std::sync::atomic::AtomicBool::new(false);
    let next = AtomicU64::new(args.seeds.start);
    let failed = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..args.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= args.seeds.end {
                        break;
                    }
                    let outcome = run(seed, &scenario);
                    if args.show {
                        println!(
                            "seed {seed}: {} holds ({} of permits), {} steps, {} refused, errors {:?}, trace {:016x}",
                            outcome.holds,
                            outcome.permits,
                            outcome.steps,
                            outcome.refused,
                            outcome.errors,
                            outcome.trace
                        );
                    }
                    let mut problems: Vec<String> = outcome.violations.iter().map(ToString::to_string).collect();
                    if args.twice {
                        let again = run(seed, &scenario).trace;
                        if again != outcome.trace {
                            problems.push(format!("not deterministic: trace {:016x} then {again:016x}", outcome.trace));
                        }
                    }
                    if !problems.is_empty() {
                        // The first few: the rest are usually the same
                        // bug seen again, and the replay shows them all.
                        let shown = problems.len().min(SHOWN_PROBLEMS);
                        eprintln!(
                            "seed {seed}: {} problem(s)\n  {}\n  replay: cargo run --release -p quorumlock-sim -- --seeds {seed} {} --log quorumlock=debug",
                            problems.len(),
                            problems[..shown].join("\n  "),
                            replay_flags(&args.scenario, &scenario)
                        );
                        failed.lock().unwrap_or_else(|e| e.into_inner()).push(seed);
                        let first = !shrunk_one.swap(true, Ordering::Relaxed);
                        if (first || args.shrink_all) && !outcome.violations.is_empty() {
                            print_shrunk(seed, &args.scenario, &scenario, &outcome);
                        }
                    }
                }
            });
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let runs = args.seeds.end.saturating_sub(args.seeds.start);
    let failed = failed.into_inner().unwrap_or_default();
    println!(
        "{runs} seeds of {} in {seconds:.1} s ({:.0} seeds per minute{}); {} failed",
        args.scenario,
        runs as f64 * 60.0 / seconds.max(1e-9),
        if args.twice { ", each run twice" } else { "" },
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
