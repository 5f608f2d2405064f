# Sourced by scripts/test.sh: makes sure `etcd` and `etcdctl` (the etcd
# backend's tests start real members) and `protoc` (the etcd client crate
# compiles etcd's protocol definitions) are on PATH, installing Debian's
# packages when they are missing and we can. The tests start their own
# members on free loopback ports; nothing here starts or touches a system etcd.

missing=""
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
command -v etcdctl >/dev/null 2>&1 || missing="$missing etcd-client"
command -v protoc >/dev/null 2>&1 || missing="$missing protobuf-compiler"
if [ -n "$missing" ]; then
  echo "not found:$missing; installing Debian's packages..." >&2
  if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    # The package's own etcd service is not wanted: tests start their own members.
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $sudo apt-get install -y -qq $missing >/dev/null
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
      $sudo systemctl stop etcd || true
    fi
  else
    echo "error: no apt-get here; install$missing yourself (e.g. 'brew install etcd protobuf')" >&2
    exit 1
  fi
fi
etcd --version | head -1
