"""The lock through both clients: exclusion, renewal, fencing, release,
settings and errors, against three real redis-server processes."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta

import pytest

import quorumlock
from quorumlock.asyncio import Redlock as AsyncRedlock

from conftest import wait_until


def held_on(nodes, name):
    """The values of ``name`` on each node."""
    return [node.client.get(name) for node in nodes]


def test_a_held_lock_excludes_others_until_released(urls, redis_nodes, name):
    with quorumlock.Redlock(urls) as locks:
        assert (locks.nodes, locks.quorum) == (3, 2)
        with locks.lock(name, ttl=10) as guard:
            assert re.fullmatch(r"[0-9a-f]{32}", guard.token)
            wait_until("every node holds it", lambda: held_on(redis_nodes, name) == [guard.token] * 3, timeout=2)
            with pytest.raises(quorumlock.LockHeld) as held:
                locks.lock(name, ttl=10, wait=0).acquire()
            assert held.value.refused >= 2 and held.value.nodes == 3
            assert locks.try_lock(name, ttl=10).acquire() is None
            assert 0 < guard.remaining <= 10
        wait_until("the keys are gone", lambda: held_on(redis_nodes, name) == [None] * 3, timeout=2)
        with locks.try_lock(name, ttl=10) as again:
            assert again is not None


def test_the_async_client_and_the_blocking_one_exclude_each_other(urls, name):
    locks = quorumlock.Redlock(urls)

    async def while_held_by_the_blocking_client():
        async with AsyncRedlock(urls) as async_locks:
            with pytest.raises(quorumlock.LockHeld):
                async with async_locks.lock(name, ttl=10, wait=0):
                    pytest.fail("entered a held lock")
            async with async_locks.try_lock(name, ttl=10) as guard:
                assert guard is None

    async def hold_with_the_async_client():
        async with AsyncRedlock(urls) as async_locks:
            guard = await async_locks.lock(name, ttl=10)
            held_elsewhere = await asyncio.get_running_loop().run_in_executor(
                None, lambda: locks.try_lock(name, ttl=10).acquire()
            )
            await guard.release()
            return held_elsewhere

    with locks.lock(name, ttl=10):
        asyncio.run(while_held_by_the_blocking_client())
    assert asyncio.run(hold_with_the_async_client()) is None
    locks.close()


async def test_a_lock_outlives_its_ttl_while_renewed(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        async with locks.lock(name, ttl=0.5) as guard:
            await asyncio.sleep(1.5)
            assert guard.is_held()
            wait_until("every node holds it", lambda: held_on(redis_nodes, name) == [guard.token] * 3, timeout=2)
            assert all(node.client.pttl(name) > 0 for node in redis_nodes)


def test_fencing_tokens_grow_across_holders(urls, name):
    with quorumlock.Redlock(urls, fenced=True) as locks:
        fences = []
        for _ in range(3):
            with locks.lock(name, ttl=5) as guard:
                fences.append(guard.fence)
        assert all(isinstance(f, int) for f in fences)
        assert fences == sorted(set(fences)), fences
        with locks.lock(name, ttl=5, fenced=False) as plain:
            assert plain.fence is None


def test_release_gives_the_lock_back_once(urls, redis_nodes, name):
    with quorumlock.Redlock(urls) as locks:
        guard = locks.lock(name, ttl=10).acquire()
        report = guard.release()
        assert report["nodes"] == 3 and report["confirmed"] >= 2 and report["kept"] == 0
        assert guard.release() is None
        assert not guard.is_held()
        guard.check()  # released, not lost
        wait_until("the keys are gone", lambda: held_on(redis_nodes, name) == [None] * 3, timeout=2)


def test_a_list_of_resources_is_locked_together(urls, name):
    with quorumlock.Redlock(urls) as locks:
        with locks.lock([name + ":a", name + ":b"], ttl=10) as guard:
            assert guard.resources == [name + ":a", name + ":b"]
            assert locks.try_lock(name + ":b", ttl=10).acquire() is None
            assert locks.try_lock([name + ":c", name + ":a"], ttl=10).acquire() is None
        assert locks.try_lock(name + ":a", ttl=10).acquire() is not None


def test_durations_are_float_seconds_or_timedeltas(urls, name):
    with quorumlock.Redlock(urls, wait=timedelta(milliseconds=300)) as locks:
        with locks.lock(name, ttl=timedelta(seconds=5)) as guard:
            assert 4 < guard.remaining <= 5
            started = time.monotonic()
            with pytest.raises(quorumlock.LockHeld):
                locks.lock(name, ttl=5).acquire()
            assert 0.25 < time.monotonic() - started < 3


@pytest.mark.parametrize(
    "call, setting",
    [
        (lambda locks, name: locks.lock(name, ttl=-1).acquire(), "ttl"),
        (lambda locks, name: locks.lock(name, ttl=True).acquire(), "ttl"),
        (lambda locks, name: locks.lock(name, ttl="10s").acquire(), "ttl"),
        (lambda locks, name: locks.lock(name, ttl=1, wait=float("nan")).acquire(), "wait"),
        (lambda locks, name: locks.lock(name, ttl=1, colour="red"), "colour"),
        (lambda locks, name: locks.lock("quorumlock:reserved", ttl=1).acquire(), "resources"),
        (lambda locks, name: locks.lock([], ttl=1).acquire(), "resources"),
    ],
)
def test_bad_arguments_are_config_errors_naming_the_setting(urls, name, call, setting):
    with quorumlock.Redlock(urls) as locks:
        with pytest.raises(quorumlock.ConfigError) as error:
            call(locks, name)
        assert isinstance(error.value, ValueError)
        assert error.value.setting == setting, error.value


def test_a_client_without_nodes_is_a_config_error():
    with pytest.raises(quorumlock.ConfigError) as error:
        quorumlock.Redlock([])
    assert error.value.setting == "nodes"


def test_from_env_reads_the_nodes(monkeypatch, urls, name):
    monkeypatch.setenv("QUORUMLOCK_NODES", ",".join(urls))
    monkeypatch.setenv("QUORUMLOCK_WAIT", "200ms")
    with quorumlock.Redlock.from_env() as locks:
        assert locks.nodes == 3
        with locks.lock(name, ttl=5):
            started = time.monotonic()
            with pytest.raises(quorumlock.LockHeld):
                locks.lock(name, ttl=5).acquire()
            assert time.monotonic() - started < 3


def test_nodes_that_do_not_answer_are_a_quorum_unreachable(urls, name):
    dead = [f"redis://127.0.0.1:{port}" for port in (1, 2)]
    with quorumlock.Redlock([urls[0], *dead], connect_timeout=0.2, wait=0) as locks:
        with pytest.raises(quorumlock.QuorumUnreachable) as error:
            locks.lock(name, ttl=5).acquire()
        assert isinstance(error.value, ConnectionError)
        assert (error.value.quorum, error.value.nodes) == (2, 3)
        assert error.value.succeeded <= 1
        assert len(error.value.node_errors) == 2, error.value.node_errors


def test_a_closed_client_takes_no_lock(urls, redis_nodes, name):
    locks = quorumlock.Redlock(urls)
    guard = locks.lock(name, ttl=30).acquire()
    report = locks.close()
    assert report["released"] == 1 and report["complete"]
    wait_until("the keys are gone", lambda: held_on(redis_nodes, name) == [None] * 3, timeout=2)
    assert not guard.is_held()
    with pytest.raises(quorumlock.ClientClosed):
        locks.lock(name, ttl=5).acquire()


def test_inspect_and_force_unlock_see_the_holder(urls, redis_nodes, name):
    with quorumlock.Redlock(urls) as locks:
        guard = locks.lock(name, ttl=30).acquire()
        seen = locks.inspect(name)
        assert seen["verdict"] == "held" and seen["token"] == guard.token
        assert [n["state"] for n in seen["nodes"]] == ["held"] * 3
        report = locks.force_unlock(name)
        assert report["deleted"] == 3 and report["answered"] == 3
        wait_until("the keys are gone", lambda: held_on(redis_nodes, name) == [None] * 3, timeout=2)
        assert locks.inspect(name)["verdict"] == "free"


def test_metrics_render_in_prometheus_format(urls, name):
    quorumlock.enable_metrics()
    with quorumlock.Redlock(urls) as locks:
        with locks.lock(name, ttl=5):
            pass
    text = quorumlock.render_metrics()
    assert "quorumlock_" in text, text[:500]


async def test_extend_moves_the_validity_of_a_lock_not_renewed(urls, redis_nodes, name):
    async with AsyncRedlock(urls, auto_renew=False) as locks:
        async with locks.lock(name, ttl=1) as guard:
            assert guard.remaining <= 1
            await guard.extend(5)
            assert 4 < guard.remaining <= 5
            # The extend returns once a majority confirmed it; the last node's reply may still be
            # on its way, so only a majority is certain now and every node soon after.
            assert sum(node.client.pttl(name) > 4000 for node in redis_nodes) >= 2
            wait_until(
                "every node carries the extended ttl",
                lambda: all(node.client.pttl(name) > 4000 for node in redis_nodes),
                timeout=0.5,
            )
        guard = await locks.lock(name, ttl=1)
        for node in redis_nodes:
            node.client.set(name, "another-owner", px=30_000)
        with pytest.raises(quorumlock.LockLost):
            await guard.extend(5)
