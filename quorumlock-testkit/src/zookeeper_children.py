# Run by quorumlock-testkit's ZkEnsemble::children: lists the children of
# the znode argv[2] on the ensemble argv[1], one per line, connecting within
# argv[3] seconds; prints nothing (and succeeds) when the znode is missing.
import sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
zk = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
zk.start(timeout=float(sys.argv[3]))
try:
    print("\n".join(zk.get_children(sys.argv[2])))
except NoNodeError:
    pass
finally:
    zk.stop()
