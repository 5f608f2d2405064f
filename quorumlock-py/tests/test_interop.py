"""The same nodes and keys as other Redis locks, both directions:
redis-py's ``Lock`` (one node), pottery's ``Redlock`` (its keys are
``redlock:`` + the name) and the Rust command-line tool."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import redis
from pottery import Redlock as PotteryRedlock

import quorumlock

#: Exit status of ``quorumlock run`` when another owner holds the lock.
BUSY = 75


def test_redis_py_lock_and_quorumlock_exclude_each_other(redis_node, name):
    client = redis.Redis(host="127.0.0.1", port=redis_node.port)
    with quorumlock.Redlock([redis_node.url]) as locks:
        theirs = client.lock(name, timeout=10)
        assert theirs.acquire(blocking=False)
        assert locks.try_lock(name, ttl=10).acquire() is None
        theirs.release()
        with locks.lock(name, ttl=10):
            assert not client.lock(name, timeout=10).acquire(blocking=False)
        assert client.lock(name, timeout=10).acquire(blocking=False)


def test_pottery_redlock_and_quorumlock_exclude_each_other(redis_nodes, urls, name):
    masters = {redis.Redis(host="127.0.0.1", port=node.port) for node in redis_nodes}
    with quorumlock.Redlock(urls) as locks:
        theirs = PotteryRedlock(key=name, masters=masters, auto_release_time=10)
        assert theirs.acquire(blocking=False)
        assert locks.try_lock("redlock:" + name, ttl=10).acquire() is None
        theirs.release()
        with locks.lock("redlock:" + name, ttl=10):
            other = PotteryRedlock(key=name, masters=masters, auto_release_time=10)
            assert not other.acquire(blocking=False)


def cli() -> str:
    path = os.environ.get("QUORUMLOCK_CLI")
    if not path:
        pytest.fail("QUORUMLOCK_CLI names the quorumlock binary (scripts/test.sh sets it)")
    return path


def test_the_rust_cli_and_quorumlock_python_exclude_each_other(urls, name):
    env = dict(os.environ, QUORUMLOCK_NODES=",".join(urls))
    run = [cli(), "run", "--key", name, "--ttl", "10s", "--wait", "0"]
    with quorumlock.Redlock(urls) as locks:
        with locks.lock(name, ttl=10):
            busy = subprocess.run([*run, "--", "true"], env=env, timeout=30)
            assert busy.returncode == BUSY
        holder = subprocess.Popen([*run, "--", "sleep", "30"], env=env)
        try:
            deadline = time.monotonic() + 10
            while locks.inspect(name)["verdict"] != "held":
                assert time.monotonic() < deadline, "the CLI never took the lock"
                time.sleep(0.05)
            assert locks.try_lock(name, ttl=10).acquire() is None
        finally:
            holder.terminate()
            holder.wait(timeout=30)
