//! The simulator's runner: `quorumlock-sim --seeds A..B [--scenario NAME]
//! [--twice] [--threads N]`. Runs each seed, prints every violation with
//! the command that replays it, and the seeds per minute.

use std::ops::Range;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use quorumlock_sim::{Scenario, run};

/// Problems printed per failing seed.
const SHOWN_PROBLEMS: usize = 5;

struct Args {
    seeds: Range<u64>,
    scenario: String,
    twice: bool,
    threads: usize,
    /// Print each run's statistics.
    show: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: quorumlock-sim --seeds A..B | --seeds N [--scenario standard|calm|short] [--twice] [--threads N] [--show] [--log FILTER]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        seeds: 0..100,
        scenario: "standard".to_owned(),
        twice: false,
        show: false,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
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
            "--twice" => args.twice = true,
            "--show" => args.show = true,
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
    args
}

fn main() -> ExitCode {
    let args = parse();
    let Some(scenario) = Scenario::named(&args.scenario) else {
        usage()
    };
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
                            "seed {seed}: {} problem(s)\n  {}\n  replay: cargo run --release -p quorumlock-sim -- --seeds {seed} --scenario {} --log quorumlock=debug",
                            problems.len(),
                            problems[..shown].join("\n  "),
                            args.scenario
                        );
                        failed.lock().unwrap_or_else(|e| e.into_inner()).push(seed);
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
