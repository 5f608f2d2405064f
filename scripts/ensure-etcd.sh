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
  source "$(dirname "${BASH_SOURCE[0]}")/install-packages.sh"
  # shellcheck disable=SC2086 # one word per package
  install_packages "brew install etcd protobuf" $missing
fi
# sed reads the whole output: head would close the pipe early, and under
# pipefail the SIGPIPE etcd may get then ends the script.
etcd --version | sed -n 1p
