#!/bin/sh
# A job that posts an amount to a ledger row in SQLite only while it holds
# the newest lock: run it under `quorumlock run --fenced`, which exports
# QUORUMLOCK_FENCE_TOKEN, a number larger than every earlier holder's.
#
#   quorumlock run --key ledger --fenced -- sh fenced_job.sh ledger.db 25
#
# The UPDATE is guarded by `WHERE fence < :token`: a job that lost its lock
# (paused, or its write delayed on the way) carries a smaller token than the
# holder that came after it, so its write changes no row and the job exits 3
# instead of overwriting newer work.
set -eu

if [ $# -ne 2 ]; then
  echo "usage: $0 DATABASE AMOUNT" >&2
  exit 64
fi
db=$1
amount=$2

token=${QUORUMLOCK_FENCE_TOKEN:-}
case $token in
  '' | *[!0-9]*)
    echo "fenced_job: QUORUMLOCK_FENCE_TOKEN is not set to a number; run me under 'quorumlock run --fenced'" >&2
    exit 64
    ;;
esac
case $amount in
  '' | - | *[!0-9-]* | ?*-*)
    echo "fenced_job: AMOUNT must be an integer, not '$amount'" >&2
    exit 64
    ;;
esac

# The parameters are bound by sqlite3 itself (.parameter), never spliced
# into the SQL text. changes() is the number of rows the UPDATE wrote.
changed=$(sqlite3 -batch "$db" <<SQL
CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL);
INSERT OR IGNORE INTO ledger (id, balance, fence) VALUES (1, 0, 0);
.parameter set :token $token
.parameter set :amount $amount
UPDATE ledger SET balance = balance + :amount, fence = :token WHERE id = 1 AND fence < :token;
SELECT changes();
SQL
)

if [ "$changed" != 1 ]; then
  echo "fenced_job: refused: a holder with a newer fencing token than $token already wrote" >&2
  exit 3
fi
echo "fenced_job: posted $amount with fencing token $token"
