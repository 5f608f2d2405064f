# Run by the consensus suite's ZooKeeper fixture (zookeeper/mod.rs) on the
# ensemble argv[1]: `leftovers PATH` prints every ephemeral node under the
# znode PATH (a lock's nodes; their parents are containers), one per line,
# nothing when PATH is missing; `delete PATH` deletes the node PATH.
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError


def ephemerals(zk, path):
    try:
        children = zk.get_children(path)
    except NoNodeError:
        return
    for child in children:
        node = f"{path}/{child}"
        try:
            _, stat = zk.get(node)
        except NoNodeError:
            continue
        if stat.ephemeralOwner:
            yield node
        yield from ephemerals(zk, node)


hosts, command, path = sys.argv[1:4]
zk = KazooClient(hosts=hosts, timeout=10)
zk.start(timeout=10)
try:
    if command == "leftovers":
        print("\n".join(ephemerals(zk, path)))
    elif command == "delete":
        zk.delete(path)
    else:
        sys.exit(f"unknown command {command!r}")
finally:
    zk.stop()
