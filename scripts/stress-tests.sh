#!/usr/bin/env bash
# Hunts flaky tests: runs every integration test binary ROUNDS times,
# COPIES processes of it at once (more load than CI, and two processes
# competing for loopback ports). Not part of CI.
#
#   bash scripts/stress-tests.sh [ROUNDS] [COPIES]    (default 5 rounds, 2 copies)
#   STRESS_ONLY=quorumlock-cli bash scripts/stress-tests.sh
#       only the binaries whose package-target name matches the regex: each
#       package's tests are one binary, `it` (quorumlock-it,
#       quorumlock-cli-it, quorumlock-testkit-it), beside quorumlock's
#       metrics, from_env and tokens
#   STRESS_FILTER='zookeeper:: etcd::' bash scripts/stress-tests.sh
#       only the tests whose name contains one of these words (the test
#       binaries' own filter: a test's name is its module path, such as
#       consensus::zookeeper::chaos::..., and binaries with none of them
#       run nothing)
#
# Logs go to $STRESS_DIR (default: a new temp dir); failures are listed at the
# end, and the exit code is 1 if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
copies=${2:-2}
dir=${STRESS_DIR:-$(mktemp -d -t quorumlock-stress.XXXXXX)}
mkdir -p "$dir"
source scripts/ensure-redis.sh
source scripts/ensure-etcd.sh
source scripts/ensure-zookeeper.sh
# Every integration test binary: package-target and path, from cargo's
# build messages (every package names its test target `it`). Every feature,
# as scripts/test.sh builds them.
mapfile -t binaries < <(
  cargo test --no-run --all-features --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        package = os.path.basename(os.path.dirname(m["manifest_path"]))
        print(package + "-" + m["target"]["name"], m["executable"])
'
)
# STRESS_FILTER's words, one argument each.
read -r -a filter <<<"${STRESS_FILTER:-}"
failed=0
for round in $(seq 1 "$rounds"); do
  for entry in "${binaries[@]}"; do
    name=${entry%% *}
    binary=${entry#* }
    if [[ -n "${STRESS_ONLY:-}" && ! "$name" =~ $STRESS_ONLY ]]; then
      continue
    fi
    pids=()
    for copy in $(seq 1 "$copies"); do
      "$binary" "${filter[@]}" >"$dir/$name.$round.$copy.log" 2>&1 &
      pids+=($!)
    done
    for i in "${!pids[@]}"; do
      if ! wait "${pids[$i]}"; then
        echo "FAILED: $name, round $round, copy $((i + 1)): $dir/$name.$round.$((i + 1)).log"
        failed=1
      fi
    done
  done
  echo "round $round of $rounds done"
done
exit $failed
