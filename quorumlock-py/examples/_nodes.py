"""Where the examples find their Redis nodes: ``QUORUMLOCK_NODES`` when it is
set, else redis-server processes started here on free loopback ports and
stopped when the example ends. Not part of the package."""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import tempfile
import time
from typing import List


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def local_nodes(count: int = 3) -> List[str]:
    """The nodes to lock on, as URLs."""
    configured = os.environ.get("QUORUMLOCK_NODES")
    if configured:
        return configured.split(",")
    workdir = tempfile.mkdtemp(prefix="quorumlock-example-")
    urls = []
    for _ in range(count):
        port = _free_port()
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
        atexit.register(lambda s=server: (s.kill(), s.wait()))
        deadline = time.monotonic() + 10
        while not _answers(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.02)
        urls.append(f"redis://127.0.0.1:{port}")
    os.environ["QUORUMLOCK_NODES"] = ",".join(urls)
    return urls
