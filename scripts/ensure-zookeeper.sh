# Sourced (like scripts/ensure-etcd.sh): makes sure the ZooKeeper test kit
# can run, installing what is missing when we can: Debian's `zookeeper`
# package (the servers' jars, and java through its dependencies) and the
# python3 client kazoo (the kit's `children` and the tests' clients use
# it). The tests start their own servers on free loopback ports; nothing
# here starts or touches a system ZooKeeper.

if [ ! -e /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then
  source "$(dirname "${BASH_SOURCE[0]}")/install-packages.sh"
  install_packages "brew install zookeeper" zookeeper
fi
if ! python3 -c 'import kazoo' >/dev/null 2>&1; then
  echo "not found: python3's kazoo; installing it with pip..." >&2
  # --user when not root, so that no system directory is written.
  user=""
  if [ "$(id -u)" != 0 ]; then user="--user"; fi
  # A Debian system python3 refuses pip (PEP 668: externally managed);
  # there Debian's own package does.
  if ! python3 -m pip install -q $user kazoo; then
    source "$(dirname "${BASH_SOURCE[0]}")/install-packages.sh"
    install_packages "pip install kazoo" python3-kazoo
  fi
fi
echo "ZooKeeper $(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo '(not from a Debian package)'), kazoo $(python3 -c 'import kazoo.version; print(kazoo.version.__version__)')"
