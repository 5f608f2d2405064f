#!/usr/bin/env bash
# The simulator's sensitivity: plants each mutant of quorumlock-sim/mutants/
# mutate.py (one bug put back) in a checkout of HEAD, builds the simulator
# against it, runs seeds 0..SEEDS (1,000 by default) of the scenario that
# can show that bug, and prints how many seeds found it, the first, and the
# median number of seeds a search from a random start needs. Then replays
# the first finding seed to show that it fails again.
#   bash scripts/sim-mutants.sh [MUTANT...]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-1000}
work=target/sim-mutants
tree=$work/tree
mkdir -p "$work"
# The mutant and the scenario that can show it.
declare -A scenario=(
  [heal_after_release]=calm
  [release_without_owner_check]=standard
  [validity_without_drift]=expiry
  [refused_attempt_not_undone]=calm
  [batch_release_before_its_set]=busy
  [fast_clock_ignored]=fast
)
mutants=("$@")
if [ ${#mutants[@]} -eq 0 ]; then
  mutants=(heal_after_release release_without_owner_check validity_without_drift
           refused_attempt_not_undone batch_release_before_its_set fast_clock_ignored)
fi
git worktree remove --force "$tree" 2>/dev/null || true
git worktree add --force --detach "$tree" HEAD >/dev/null
trap 'git worktree remove --force "$tree" 2>/dev/null || true' EXIT
for mutant in "${mutants[@]}"; do
  git -C "$tree" checkout --quiet -- .
  python3 quorumlock-sim/mutants/mutate.py "$tree" "$mutant"
  CARGO_TARGET_DIR="$work/target" cargo build --quiet --release -p quorumlock-sim \
    --manifest-path "$tree/Cargo.toml"
  run="$work/target/release/quorumlock-sim"
  log="$work/$mutant.log"
  "$run" --seeds "0..$seeds" --scenario "${scenario[$mutant]}" >"$log.out" 2>"$log" || true
  python3 - "$mutant" "${scenario[$mutant]}" "$seeds" "$log" <<'PY'
import re, statistics, sys
mutant, scenario, seeds, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
failing = sorted({int(m) for m in re.findall(r"^seed (\d+): \d+ problem", open(log).read(), re.M)})
first_problem = ""
for line in open(log):
    if line.startswith("  ") and not line.startswith("  replay"):
        first_problem = line.strip()
        break
# From each start, the seeds a search runs until it meets a finding seed,
# the range taken as a ring (a search past the last seed goes on at 0).
needed = [min((f - s) % seeds for f in failing) + 1 for s in range(seeds)] if failing else []
median = statistics.median(needed) if needed else None
print(f"{mutant} ({scenario}): {len(failing)} of {seeds} seeds found it; first seed "
      f"{failing[0] if failing else '-'}; median seeds to find it {median if median is not None else '-'}")
if first_problem:
    print(f"  e.g. {first_problem[:220]}")
PY
  first=$(grep -m1 -oP '^seed \K\d+(?=: \d+ problem)' "$log" || true)
  if [ -n "$first" ]; then
    if "$run" --seeds "$first" --scenario "${scenario[$mutant]}" >/dev/null 2>&1; then
      echo "  replay of seed $first: passed (not reproduced)"
    else
      echo "  replay of seed $first: fails again"
    fi
  fi
done
