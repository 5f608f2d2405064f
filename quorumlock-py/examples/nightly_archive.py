"""One nightly archive job across machines: the same cron line fires on
three machines at 03:00, and exactly one of them archives.

``wait=2`` matters: machines firing at the same moment can split the
nodes between them (each first on one node), so that nobody has a
majority; a short wait retries and one of them wins. ``min_hold`` keeps
the lock for ten minutes after a quick job, so that a machine whose cron
fires late does not run it again.

Run: ``python nightly_archive.py`` (starts local nodes unless
``QUORUMLOCK_NODES`` is set); it starts three processes at once and
asserts that one archived and two were told it was taken.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import quorumlock

from _nodes import local_nodes

#: Exit status of a process that found the job taken (as sysexits' EX_TEMPFAIL).
BUSY = 75


def archive_once(ledger: str) -> int:
    locks = quorumlock.Redlock.from_env()
    try:
        with locks.lock("archive:nightly", ttl=60, wait=2, min_hold=600):
            with open(ledger, "a") as out:
                out.write(f"archived by {os.getpid()}\n")
            return 0
    except quorumlock.LockHeld:
        return BUSY
    finally:
        locks.close()


def main() -> None:
    local_nodes()
    ledger = os.path.join(tempfile.mkdtemp(prefix="archive-"), "ledger")
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", ledger]) for _ in range(3)]
    codes = sorted(worker.wait(timeout=60) for worker in workers)
    with open(ledger) as lines:
        archived = lines.read().splitlines()
    assert codes == [0, BUSY, BUSY], codes
    assert len(archived) == 1, archived
    print(f"three processes at once: {archived[0]}; two were busy")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(archive_once(sys.argv[2]))
    main()
