//! `run --help`'s closing text.

use crate::exit::{self, Exit};

use super::metrics_file;

/// `run --help`'s closing text: examples, what the command gets, the
/// guarantees, the metrics file, the exit statuses.
pub(super) fn run_help() -> String {
    format!(
        "\
Examples:
  # crontab: the nightly archive runs on one machine of the fleet; the others skip it
  0 3 * * * quorumlock run --key archive:nightly --wait 2s -- /usr/local/bin/archive
  # wait up to 2 minutes for a busy lock, renew a 1-minute ttl while the job runs
  quorumlock run --key reindex --ttl 1m --wait 2m --nodes redis://a:6379,redis://b:6379,redis://c:6379 -- ./reindex.sh
  # crontab: once per hour on the whole fleet, even when the job takes a second and
  # the machines' clocks differ: the lock stays taken for 10 minutes, longer than
  # the others wait for it, so they give up instead of running it again
  0 * * * * quorumlock run --key sync:hourly --wait 30s --min-hold 10m -- /usr/local/bin/sync
  # pass the fencing token on, for the job's writes to refuse a stale holder
  quorumlock run --key ledger --fenced -- ./post-ledger.sh   # reads $QUORUMLOCK_FENCE_TOKEN

The command gets QUORUMLOCK_KEY (the key) and QUORUMLOCK_LOCK_TOKEN (the lock's
random token, the keys' value) in its environment, and with --fenced also
QUORUMLOCK_FENCE_TOKEN: a number larger than every earlier holder's, to check
in the job's writes (e.g. SQL `UPDATE ... WHERE fence < :token`).

The command runs in its own process group and should not read from the terminal.
It does not inherit QUORUMLOCK_NODES (nor any other variable of quorumlock's that
may hold a password). It runs as your user, though, and can read what you can:
a nodes file, quorumlock's own environment (/proc/PID/environ).
No process of that group runs without the lock:
  - the command starts only while the lock has more than --grace (and one
    renewal round) of validity left; if quorumlock was held up since taking the
    lock, the command does not run (exit {lost});
  - when the lock is lost, or less than --grace of validity is left unconfirmed,
    the group gets SIGTERM, then SIGKILL after --grace (exit {lost});
  - a guardian process kills the group if quorumlock dies (even by SIGKILL) or
    is stopped past the lock's validity;
  - processes left in the group after the command exits (a `&` job) get SIGTERM,
    then SIGKILL after --grace; the lock is released once the group is empty.
Signals INT, TERM, HUP, QUIT are forwarded to the group, with SIGKILL after
--grace; the command's status is returned. Ctrl-Z stops the group and
quorumlock; on continuing, the group resumes only if the lock is still held
with more than --grace of validity left, else it is killed (exit {lost}).

With --metrics-file PATH, quorumlock writes PATH when it ends (on any ending but
SIGKILL), in the Prometheus text format, for node_exporter's textfile collector:
  quorumlock_run_outcome{{outcome=\"O\"}} 1    how it ended, O one of
      {outcomes_1},
      {outcomes_2}
  quorumlock_run_exit_code                 the status quorumlock exits with
  quorumlock_run_wait_seconds              from the lock call to its answer
  quorumlock_run_held_seconds              from taking the lock to giving it back
  quorumlock_run_command_seconds           from the command's start to its end
  quorumlock_run_last_timestamp_seconds    when the run ended (Unix time)
and the library's own quorumlock_* metrics (lock calls, attempts, renewals,
losses, node errors). No label names the key; --metrics-job NAME adds a `job`
label to every line. The file is written as PATH.tmp.PID, then renamed over
PATH, so that a scrape never reads half of it (the collector reads only *.prom):
  */10 * * * * quorumlock run --key report --wait 2s \\
      --metrics-file /var/lib/node_exporter/textfile/report.prom -- ./report
A file that cannot be written is warned about; the exit status stays the run's.\n\n{statuses}",
        lost = Exit::Lost.code(),
        outcomes_1 = metrics_file::OUTCOMES[..5].join(", "),
        outcomes_2 = metrics_file::OUTCOMES[5..].join(", "),
        statuses = exit::table(Some("run"))
    )
}
