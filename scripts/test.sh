#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): every test runs
# against real redis-server processes that the tests start themselves.
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

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  echo "rustfmt not installed: skipping the format check" >&2
fi
if cargo clippy --version >/dev/null 2>&1; then
  # The default members and the Python package's extension (not a default
  # member, so that a plain `cargo build` needs no Python); the model.
  step cargo clippy --all-targets --all-features -p quorumlock -p quorumlock-cli -p quorumlock-testkit \
    -p quorumlock-py -- -D warnings
  step cargo clippy -p quorumlock-model --all-targets -- -D warnings
else
  echo "clippy not installed: skipping lints" >&2
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
# The Python package (quorumlock-py/): a venv with the pinned tools, then the
# wheel that maturin builds and its install there. Also in the background,
# in a target directory of its own (the extension's dependencies resolve
# apart from the tests'); the pytest suite and the examples run after the
# tests below.
python_dir=target/python
mkdir -p "$python_dir"
(
  set -e
  step python3 -m venv "$python_dir/venv"
  step "$python_dir/venv/bin/pip" install --quiet --disable-pip-version-check \
    -r quorumlock-py/requirements-dev.txt
  rm -rf "$python_dir/wheels"
  step nice -n 19 env CARGO_TARGET_DIR="$python_dir/cargo" "$python_dir/venv/bin/maturin" build \
    --quiet --profile dev -m quorumlock-py/Cargo.toml -o "$python_dir/wheels"
  step "$python_dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    --force-reinstall "$python_dir"/wheels/quorumlock-*.whl
) >"$python_dir/log" 2>&1 &
python_pid=$!
# Library, CLI, test kit, integration tests and the README/rustdoc examples,
# with every feature of the three packages: the library's etcd, ZooKeeper and
# blocking clients and rediss:// (and etcds://) over TLS, the CLI's demo, etcd,
# ZooKeeper and tls. The comparison runner with them, a package outside the
# default members (so that a plain `cargo test` never compiles the peer
# crates) whose test is its smoke run: every scenario with tiny counts. One
# feature set for every package, so that one build of the dependencies
# serves them all; it is the clippy run's above, whose build scripts and
# proc macros it reuses. Every test binary runs, so that one failure does not
# hide another.
suite=(--all-features --workspace --exclude quorumlock-model)
tests_status=0
step cargo test --no-fail-fast "${suite[@]}" || tests_status=$?
background_status=0
wait "$background_pid" || background_status=$?
cat "$background/log"
python_status=0
wait "$python_pid" || python_status=$?
cat "$python_dir/log"
if [ "$tests_status" -ne 0 ] || [ "$background_status" -ne 0 ] || [ "$python_status" -ne 0 ]; then
  echo "test.sh: the tests exited $tests_status, the background work $background_status," \
    "the Python package's build $python_status" >&2
  exit 1
fi
# The Python package's tests, against the wheel installed in the venv, beside
# the binary the test run built (the interoperation tests run it), and its
# examples, each starting its own nodes and asserting its outcome.
python="$python_dir/venv/bin/python"
step env QUORUMLOCK_CLI="${CARGO_TARGET_DIR:-target}/debug/quorumlock" \
  "$python" -m pytest -q -p no:cacheprovider quorumlock-py/tests
for example in fastapi_documents nightly_archive llm_key_pool idempotency_key; do
  step env -u QUORUMLOCK_NODES "$python" "quorumlock-py/examples/$example.py"
done
# Its benchmark against redis-py and pottery, as a smoke run (tiny counts).
step env -u QUORUMLOCK_NODES "$python" quorumlock-py/bench/compare.py --smoke >/dev/null
# The API docs build without a broken link (here, not in the background: its
# check of the dependencies shares the clippy run's).
step env RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p quorumlock --no-deps --all-features
# Examples in their short mode, against local nodes they start; each asserts
# its outcome. The test run above built them, with its features.
examples="${CARGO_TARGET_DIR:-target}/debug/examples"
for example in cron_guard api_key_pool inventory document_worker; do
  step "$examples/$example" --short
done
step "$examples/inventory" --short --restart
# Benchmarks only as smoke runs (tiny counts): their code must not rot. The
# test run's packages and features, so that they share its build.
for bench in "latency -- --smoke" "watchdog -- --smoke" "throughput -- --smoke" \
  "cycle_profile -- --smoke" "cycle_profile -- --smoke raw" "criterion_lock"; do
  # shellcheck disable=SC2086 # the bench's name, then its arguments
  step cargo test "${suite[@]}" --bench $bench
done
echo "test.sh: passed in $SECONDS s" >&2
