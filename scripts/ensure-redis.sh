# Sourced by scripts/demo.sh and scripts/test.sh: makes sure `redis-server`
# is on PATH, installing Debian's package when it is missing and we can.
# The tests and the demo start their own servers on free loopback ports;
# nothing here starts or touches a system Redis.

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found; installing Debian's redis-server package..." >&2
  if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  else
    echo "error: no apt-get here; install redis-server yourself (e.g. 'brew install redis' or 'dnf install redis')" >&2
    exit 1
  fi
fi
redis-server --version
