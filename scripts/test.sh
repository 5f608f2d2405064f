#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): every test runs
# against real redis-server processes that the tests start themselves.
# QUORUMLOCK_SIM_SEEDS=N is its long mode for the simulator: N seeds of the
# standard scenario (and N/4 of the calm one) instead of 40 (a soak; the
# runner, `cargo run --release -p quorumlock-sim`, is faster for many).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
source scripts/ensure-etcd.sh
source scripts/ensure-zookeeper.sh

# Runs a step and prints its wall time when it ends, so that a slow run
# says where the time went; returns the step's own status.
step() {
  local started=$SECONDS status=0
  "$@" || status=$?
  echo "test.sh: $((SECONDS - started)) s for: $*" >&2
  return "$status"
}

# Whatever still runs in the background when this script ends (a step that
# failed ends it early) ends with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  echo "rustfmt not installed: skipping the format check" >&2
fi

# The protocol model (the safe configurations explored exhaustively and the
# negative controls' counterexamples, a release build), the checks of the
# library and the binary with one store's feature alone: CPU-bound work that
# runs in the background at the lowest priority while the tests below, which
# mostly wait on their servers' timers, leave the CPUs idle. It takes only
# what the tests leave (nice 19), in a target directory of its own (a cargo
# build holds its directory's lock until it ends); its log follows the
# tests'.
background=target/background
mkdir -p "$background"
(
  set -e
  export CARGO_TARGET_DIR="$background"
  step nice -n 19 cargo test --release -p quorumlock-model
  # Each store's feature must keep compiling without the other's (the code
  # that names them lives in the library's backend/ and the CLI's check/),
  # and without `tls`: checks of the library and the binary (what they do
  # without `tls` is unit-tested in every build).
  step nice -n 19 cargo check --quiet -p quorumlock -p quorumlock-cli \
    --features quorumlock/zookeeper,quorumlock-cli/zookeeper
  step nice -n 19 cargo check --quiet -p quorumlock -p quorumlock-cli \
    --features quorumlock/etcd,quorumlock/blocking,quorumlock-cli/etcd
) >"$background/log" 2>&1 &
background_pid=$!
# The Python package's venv with the pinned tools (maturin, pytest, the
# peers its tests and benchmark run against), made in the background; the
# wheel is built once the tests' build is done (below).
python_dir=target/python
mkdir -p "$python_dir"
(
  set -e
  step python3 -m venv "$python_dir/venv"
  step "$python_dir/venv/bin/pip" install --quiet --disable-pip-version-check \
    -r quorumlock-py/requirements-dev.txt
) >"$python_dir/log" 2>&1 &
python_pid=$!
# Library, CLI, test kit, integration tests, examples and benchmarks, with
# every feature of the three packages: the library's etcd, ZooKeeper and
# blocking clients and rediss:// (and etcds://) over TLS, the CLI's demo, etcd,
# ZooKeeper and tls. The comparison runner with them, a package outside the
# default members (so that a plain `cargo test` never compiles the peer
# crates) whose test is its smoke run: every scenario with tiny counts. One
# feature set for every package, so that one build of the dependencies
# serves them all. Built once; the test binaries then run in two lanes at
# once (they mostly wait on their servers' timers, and one binary, the
# library's integration tests, takes as long as all the others together),
# each binary in its package's directory, as `cargo test` runs it, and every
# one of them, so that one failure does not hide another.
suite=(--all-features --workspace --exclude quorumlock-model)
lanes=target/lanes
mkdir -p "$lanes"
step cargo test --no-run "${suite[@]}" --message-format=json-render-diagnostics >"$lanes/build.json"
# The benchmark targets alone: `--benches` would take every library too.
step cargo test --no-run --bench '*' "${suite[@]}" --message-format=json-render-diagnostics \
  >>"$lanes/build.json"
# "<kind> <package dir> <target name> <executable>" for every test binary:
# unit tests, integration tests and benchmarks (built as tests), in the
# order cargo built them.
python3 -c '
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    kind = m["target"]["kind"][0]
    if kind not in ("lib", "bin", "test", "bench"):
        sys.exit("test.sh: a test binary of an unknown kind: " + line)
    print(kind, os.path.dirname(m["manifest_path"]), m["target"]["name"], m["executable"])
' "$lanes/build.json" >"$lanes/binaries"

# Runs one test binary with its arguments in package directory $1, as cargo
# does; returns its status.
run_in() {
  local dir=$1
  shift
  (cd "$dir" && step "$@")
}

# The arguments of a benchmark's smoke run (tiny counts): its code must not
# rot, and no benchmark runs in CI.
smoke_args() {
  case $1 in
    latency | watchdog | throughput | cycle_profile) echo --smoke ;;
    criterion_lock) echo "" ;;
    *) echo "test.sh: no smoke run for benchmark $1" >&2; return 1 ;;
  esac
}

# Lane A: the library's integration tests. Lane B: every other test binary,
# the benchmarks' and examples' smoke runs, the doc tests, lints and API
# docs. Each lane's output goes to its log, printed when both ended; the
# status is the number of steps that failed.

# Whether the test binary of kind $1, package directory $2 and name $3 is
# lane A's (the library's integration tests).
in_lane_a() {
  [ "$1" = test ] && [ "$2" = "$PWD/quorumlock" ] && [ "$3" = it ]
}
lane_a() {
  local failed=0 kind dir name binary
  while read -r kind dir name binary; do
    if in_lane_a "$kind" "$dir" "$name"; then
      run_in "$dir" "$binary" || failed=$((failed + 1))
    fi
  done <"$lanes/binaries"
  return "$failed"
}
lane_b() {
  local failed=0 kind dir name binary
  while read -r kind dir name binary; do
    if in_lane_a "$kind" "$dir" "$name"; then
      continue
    fi
    if [ "$kind" = bench ]; then
      local args
      args=$(smoke_args "$name") || { failed=$((failed + 1)); continue; }
      # shellcheck disable=SC2086 # no arguments, or one
      run_in "$dir" "$binary" $args >/dev/null || failed=$((failed + 1))
      if [ "$name" = cycle_profile ]; then
        run_in "$dir" "$binary" --smoke raw >/dev/null || failed=$((failed + 1))
      fi
    else
      run_in "$dir" "$binary" || failed=$((failed + 1))
    fi
  done <"$lanes/binaries"
  # Examples in their short mode, against local nodes they start; each
  # asserts its outcome.
  local examples="${CARGO_TARGET_DIR:-target}/debug/examples" example
  for example in cron_guard api_key_pool inventory document_worker; do
    step "$examples/$example" --short || failed=$((failed + 1))
  done
  step "$examples/inventory" --short --restart || failed=$((failed + 1))
  # The README's and the rustdoc examples.
  step cargo test --doc "${suite[@]}" || failed=$((failed + 1))
  if cargo clippy --version >/dev/null 2>&1; then
    # The default members and the Python package's extension (not a default
    # member, so that a plain `cargo build` needs no Python); the model.
    step nice -n 19 cargo clippy --all-targets --all-features -p quorumlock -p quorumlock-cli \
      -p quorumlock-testkit -p quorumlock-py -p quorumlock-sim -- -D warnings || failed=$((failed + 1))
    step nice -n 19 cargo clippy -p quorumlock-model --all-targets -- -D warnings || failed=$((failed + 1))
  else
    echo "clippy not installed: skipping lints" >&2
  fi
  # The API docs build without a broken link.
  step nice -n 19 env RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p quorumlock --no-deps --all-features ||
    failed=$((failed + 1))
  return "$failed"
}
lane_a >"$lanes/a.log" 2>&1 &
lane_a_pid=$!
lane_b >"$lanes/b.log" 2>&1 &
lane_b_pid=$!

# The Python package: its wheel, built by maturin in the tests' target
# directory (after their build, so that it reuses all but the few
# dependencies whose features differ, and the extension itself), installed
# in the venv; its tests against that wheel, beside the binary the build
# above made (the interoperation tests run it), and its examples, each
# starting its own nodes and asserting its outcome; its benchmark against
# redis-py and pottery as a smoke run. The lanes' cargo commands wait for
# the build's lock meanwhile. The builds and lints that run beside the
# tests take only the CPU the tests leave (nice 19): a test binary or an
# example with 100 ms node timeouts, starved by a build, fails.
python_status=0
wait "$python_pid" || python_status=$?
cat "$python_dir/log"
python_failed=0
if [ "$python_status" -eq 0 ]; then
  python="$python_dir/venv/bin/python"
  rm -rf "$python_dir/wheels"
  if step nice -n 19 "$python_dir/venv/bin/maturin" build --quiet --profile dev -m quorumlock-py/Cargo.toml \
    -o "$python_dir/wheels" &&
    step "$python_dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
      --force-reinstall "$python_dir"/wheels/quorumlock-*.whl; then
    step env QUORUMLOCK_CLI="${CARGO_TARGET_DIR:-target}/debug/quorumlock" \
      "$python" -m pytest -q -p no:cacheprovider quorumlock-py/tests || python_failed=$((python_failed + 1))
    for example in fastapi_documents nightly_archive llm_key_pool idempotency_key; do
      step env -u QUORUMLOCK_NODES "$python" "quorumlock-py/examples/$example.py" ||
        python_failed=$((python_failed + 1))
    done
    step env -u QUORUMLOCK_NODES "$python" quorumlock-py/bench/compare.py --smoke >/dev/null ||
      python_failed=$((python_failed + 1))
  else
    python_failed=$((python_failed + 1))
  fi
fi
lane_a_failed=0
wait "$lane_a_pid" || lane_a_failed=$?
lane_b_failed=0
wait "$lane_b_pid" || lane_b_failed=$?
cat "$lanes/a.log" "$lanes/b.log"
background_status=0
wait "$background_pid" || background_status=$?
cat "$background/log"
if [ "$lane_a_failed" -ne 0 ] || [ "$lane_b_failed" -ne 0 ] || [ "$background_status" -ne 0 ] ||
  [ "$python_status" -ne 0 ] || [ "$python_failed" -ne 0 ]; then
  echo "test.sh: failed: $lane_a_failed of the library's integration tests' lane," \
    "$lane_b_failed steps of the other lane, the background work with $background_status," \
    "the Python venv with $python_status, $python_failed of the Python package's steps" >&2
  exit 1
fi
echo "test.sh: passed in $SECONDS s" >&2
