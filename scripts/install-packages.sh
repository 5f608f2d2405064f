# Sourced by the ensure-*.sh scripts: `install_packages HINT PACKAGE...`
# installs Debian's packages with apt-get (as root, or through sudo), or,
# without apt-get, says what to install (HINT: the command for other
# systems) and exits.
install_packages() {
  local hint=$1
  shift
  echo "not found: $*; installing Debian's packages..." >&2
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: no apt-get here; install $* yourself (e.g. '$hint')" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  # RUNLEVEL=1: a package's own service (etcd) is not started; the tests
  # start their own servers.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $sudo apt-get install -y -qq "$@" >/dev/null
}
