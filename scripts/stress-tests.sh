#!/usr/bin/env bash
# Hunts flaky tests: runs every integration test binary ROUNDS times,
# COPIES processes of it at once (more load than CI, and two processes
# competing for loopback ports). Not part of CI.
#
#   bash scripts/stress-tests.sh [ROUNDS] [COPIES]    (default 5 rounds, 2 copies)
#   STRESS_ONLY=zookeeper bash scripts/stress-tests.sh  (only binaries whose
#                                                        package-target name matches)
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
# build messages (two packages may have a test target of the same name).
mapfile -t binaries < <(
  cargo test --no-run --features quorumlock/etcd,quorumlock/zookeeper,quorumlock-cli/etcd,quorumlock-cli/zookeeper --message-format=json 2>/dev/null | python3 -c '
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
      "$binary" >"$dir/$name.$round.$copy.log" 2>&1 &
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
