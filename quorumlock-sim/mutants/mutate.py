#!/usr/bin/env python3
"""Plants one mutant in a checkout of quorumlock: `mutate.py ROOT NAME`.

Each mutant puts back one bug the simulator must find (docs/reliability.md,
"Deterministic simulation"): the edit is a text replacement that must match
exactly once, so a mutant that no longer applies fails loudly instead of
testing nothing.
"""
import sys

LIB = "quorumlock/src/"

MUTANTS = {
    # A release no longer waits for a renewal round being handed over: the
    # round can re-create (heal) the key the release just deleted.
    "heal_after_release": [(
        LIB + "lock/state.rs",
        "        if !self.mark_released() {",
        "        if !self.mark_released() || true {",
    )],
    # A release deletes the key whoever holds it (no owner check), in the
    # single release script and in a batch's.
    "release_without_owner_check": [
        (LIB + "backend/redlock/wire/lock.rs",
         "  if redis.call('GET', KEYS[i]) == ARGV[1] then",
         "  if redis.call('EXISTS', KEYS[i]) == 1 then"),
        (LIB + "backend/redlock/wire/batch.rs",
         "  if values[i] == token then",
         "  if values[i] then"),
        (LIB + "backend/redlock/wire/batch.rs",
         "    elseif value == ARGV[a + 1] then",
         "    elseif value then"),
    ],
    # The validity is `ttl - elapsed`, without the drift allowance.
    "validity_without_drift": [
        (LIB + "lock/lease.rs",
         "        .checked_sub(drift)\n",
         "        .checked_sub(drift * 0)\n"),
        (LIB + "lock/lease.rs",
         "self.life.saturating_sub(self.drift)",
         "self.life.saturating_sub(self.drift * 0)"),
    ],
    # A refused attempt leaves the keys it did get.
    "refused_attempt_not_undone": [(
        LIB + "backend/redlock/attempt.rs",
        "    release_all(\n        &masters.quorum,\n        attempt.release(),\n        deadlines,\n        Until::Answered,\n        &refused_by,\n    )\n    .await;",
        "    let _ = (deadlines, &refused_by);",
    )],
    # A batch runs its releases first even where one undoes an acquire of
    # the same batch.
    "batch_release_before_its_set": [(
        LIB + "backend/redlock/wire/batch.rs",
        "    if !releases_may_go_first(batch) {",
        "    if false && !releases_may_go_first(batch) {",
    )],
    # The measured rate of a node's clock is ignored: only the drift
    # allowance stands for it.
    "fast_clock_ignored": [(
        LIB + "backend/redlock/node/mod.rs",
        "        match self {\n            Node::Server(server) => server.clock_rate(),",
        "        if true {\n            return None;\n        }\n        match self {\n            Node::Server(server) => server.clock_rate(),",
    )],
}


def main():
    root, name = sys.argv[1], sys.argv[2]
    if name not in MUTANTS:
        sys.exit(f"unknown mutant {name}; known: {', '.join(MUTANTS)}")
    for path, old, new in MUTANTS[name]:
        full = f"{root}/{path}"
        text = open(full).read()
        if text.count(old) != 1:
            sys.exit(f"mutant {name}: {path} has {text.count(old)} matches for {old!r}")
        open(full, "w").write(text.replace(old, new))


if __name__ == "__main__":
    main()
