# Sourced by scripts/demo.sh and scripts/test.sh: makes sure `redis-server`
# and `redis-cli` (the Redis Cluster test kit forms its clusters with
# `redis-cli --cluster create`; Sentinel needs nothing more, being
# `redis-server --sentinel`) and, for the fenced example job and its test,
# the `sqlite3` command line are on PATH, installing Debian's packages when
# they are missing and we can (`redis-tools` holds redis-cli; the
# `redis-server` package depends on it).
# The tests and the demo start their own servers on free loopback ports;
# nothing here starts or touches a system Redis.

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v sqlite3 >/dev/null 2>&1 || missing="$missing sqlite3"
if [ -n "$missing" ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/install-packages.sh"
  # shellcheck disable=SC2086 # one word per package
  install_packages "brew install redis sqlite' or 'dnf install redis sqlite" $missing
fi
redis-server --version
redis-cli --version
