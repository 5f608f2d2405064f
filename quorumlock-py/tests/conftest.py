"""Real servers for the tests, started once per session on free loopback
ports and stopped by PID: redis-server processes (one alone, three for a
quorum), and on demand an etcd member and a ZooKeeper server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Callable, Iterator, List

import pytest
import redis

#: How long a server may take to answer after it starts.
STARTUP_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (10,000 above it, as Redis
    Cluster uses) is free too, and so below 55,536."""
    import random

    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 55_000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
                return port
        except OSError:
            continue


def wait_until(what: str, ready: Callable[[], bool], timeout: float = STARTUP_TIMEOUT) -> None:
    """Polls ``ready`` until it holds; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.02)


class Server:
    """A server process of the tests, stopped by its PID."""

    def __init__(self, args: List[str], log: str, env=None) -> None:
        self.log_path = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


class RedisNode(Server):
    def __init__(self, workdir: str) -> None:
        self.port = free_port()
        super().__init__(
            [
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", workdir,
            ],
            os.path.join(workdir, f"redis-{self.port}.log"),
        )
        self.url = f"redis://127.0.0.1:{self.port}"
        self.client = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)
        wait_until(f"redis-server on {self.port} answers", self._answers)

    def _answers(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False


@pytest.fixture(scope="session")
def workdir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="quorumlock-py-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_nodes(workdir: str) -> Iterator[List[RedisNode]]:
    """Three redis-server processes: a Redlock quorum."""
    nodes = [RedisNode(workdir) for _ in range(3)]
    yield nodes
    for node in nodes:
        node.stop()


@pytest.fixture(scope="session")
def redis_node(workdir: str) -> Iterator[RedisNode]:
    """One redis-server process."""
    node = RedisNode(workdir)
    yield node
    node.stop()


@pytest.fixture()
def urls(redis_nodes: List[RedisNode]) -> List[str]:
    return [node.url for node in redis_nodes]


@pytest.fixture()
def name() -> str:
    """A resource name of this test alone (tests share the servers)."""
    return f"test:{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def etcd_url(workdir: str) -> Iterator[str]:
    """A one-member etcd cluster."""
    client, peer = free_port(), free_port()
    data = os.path.join(workdir, f"etcd-{client}")
    server = Server(
        [
            "etcd", "--name", "py", "--data-dir", data,
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"py=http://127.0.0.1:{peer}",
            "--initial-cluster-token", os.path.basename(data),
        ],
        data + ".log",
    )

    def healthy() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", client), timeout=0.2) as s:
                s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                return b'"health":"true"' in s.recv(4096)
        except OSError:
            return False

    wait_until("etcd is healthy", healthy)
    yield f"etcd://127.0.0.1:{client}"
    server.stop()


@pytest.fixture(scope="session")
def zookeeper_url(workdir: str) -> Iterator[str]:
    """A standalone ZooKeeper server (the jars of Debian's package)."""
    port = free_port()
    data = os.path.join(workdir, f"zk-{port}")
    os.makedirs(data)
    config = os.path.join(data, "zoo.cfg")
    with open(config, "w") as out:
        out.write(
            f"tickTime=200\ndataDir={data}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n4lw.commands.whitelist=*\n"
        )
    server = Server(
        [
            "java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", config,
        ],
        config + ".log",
    )

    def serving() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    wait_until("ZooKeeper answers ruok", serving)
    yield f"zk://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(workdir: str) -> Iterator[str]:
    """A Redis Cluster of three primaries (no replicas), as one member URL."""
    nodes = []
    for _ in range(3):
        port = free_cluster_port()
        directory = os.path.join(workdir, f"cluster-{port}")
        os.makedirs(directory)
        server = Server(
            [
                "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", directory, "--cluster-enabled", "yes",
                "--cluster-config-file", os.path.join(directory, "nodes.conf"),
            ],
            os.path.join(directory, "log"),
        )
        client = redis.Redis(host="127.0.0.1", port=port)

        def answers(client=client) -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(f"cluster node {port} answers (log: {directory}/log)", answers)
        nodes.append((port, server, client))
    subprocess.run(
        ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{port}" for port, _, _ in nodes],
         "--cluster-replicas", "0", "--cluster-yes"],
        check=True, stdout=subprocess.DEVNULL, timeout=60,
    )
    wait_until(
        "the cluster is ok on every node",
        lambda: all(b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO") for _, _, client in nodes),
    )
    yield "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port, _, _ in nodes)
    for _, server, _ in nodes:
        server.stop()
