#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): every test runs
# against real redis-server processes that the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
source scripts/ensure-etcd.sh
source scripts/ensure-zookeeper.sh

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  echo "rustfmt not installed: skipping the format check" >&2
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --all-targets --all-features -- -D warnings
  cargo clippy -p quorumlock-model --all-targets -- -D warnings
else
  echo "clippy not installed: skipping lints" >&2
fi

# Library (with its etcd and ZooKeeper backends), CLI (with its demo, etcd and
# ZooKeeper nodes), test kit, integration tests and the README/rustdoc examples; every
# test binary runs, so that one failure does not hide another.
cargo test --no-fail-fast --features quorumlock-cli/demo,quorumlock-cli/etcd,quorumlock-cli/zookeeper,quorumlock/etcd,quorumlock/zookeeper
# The protocol model: the safe configurations explored exhaustively and the
# negative controls' counterexamples (release build: about a minute on 2 cores).
cargo test --release -p quorumlock-model
# The API docs build without a broken link.
RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p quorumlock --no-deps --all-features
# The optional features must keep compiling; the blocking client has its own tests.
cargo check -p quorumlock --features tls,blocking
cargo check -p quorumlock --features etcd,tls
cargo check -p quorumlock --features zookeeper
cargo check -p quorumlock-cli
cargo check -p quorumlock-cli --features tls,demo
cargo check -p quorumlock-cli --features zookeeper
cargo test -p quorumlock --features blocking --test blocking
cargo test -p quorumlock --features blocking,etcd --test etcd blocking
cargo test -p quorumlock --features blocking,zookeeper --test zookeeper blocking
# rediss:// nodes: the library and the binary against a TLS redis-server, with a
# private CA made by the test.
cargo test -p quorumlock-cli --features tls,etcd --test tls
# Examples in their short mode, against local nodes they start; each asserts its outcome.
for example in cron_guard api_key_pool inventory document_worker; do
  cargo run --quiet -p quorumlock --example "$example" -- --short
done
cargo run --quiet -p quorumlock --example inventory -- --short --restart
# Benchmarks only as smoke runs (tiny counts): their code must not rot.
cargo test -p quorumlock --bench latency -- --smoke
cargo test -p quorumlock --bench watchdog -- --smoke
cargo test -p quorumlock --bench throughput -- --smoke
cargo test -p quorumlock --bench cycle_profile -- --smoke
cargo test -p quorumlock --bench cycle_profile -- --smoke raw
cargo test -p quorumlock --bench criterion_lock
# The comparison with the peer crates (a package of its own, so that the
# commands above never compile them), every scenario with tiny counts; it
# writes to a temp dir, not to docs/.
cargo run --quiet -p quorumlock-compare -- --smoke
