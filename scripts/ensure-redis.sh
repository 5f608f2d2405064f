# Sourced by scripts/demo.sh and scripts/test.sh: makes sure `redis-server`
# (and, for the fenced example job and its test, the `sqlite3` command line)
# is on PATH, installing Debian's packages when they are missing and we can.
# The tests and the demo start their own servers on free loopback ports;
# nothing here starts or touches a system Redis.

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v sqlite3 >/dev/null 2>&1 || missing="$missing sqlite3"
if [ -n "$missing" ]; then
  echo "not found:$missing; installing Debian's packages..." >&2
  if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
  else
    echo "error: no apt-get here; install$missing yourself (e.g. 'brew install redis sqlite' or 'dnf install redis sqlite')" >&2
    exit 1
  fi
fi
redis-server --version
