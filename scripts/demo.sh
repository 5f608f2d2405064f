#!/usr/bin/env bash
# The main job: 5 local redis-server nodes, contending workers, a node killed
# and restarted mid-run, and a final table. Extra arguments go to the demo
# (`scripts/demo.sh --workers 10 --seconds 20`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-redis.sh
cargo run --release --quiet -p quorumlock-cli --features demo -- demo "$@"
