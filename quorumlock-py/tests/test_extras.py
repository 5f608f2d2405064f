"""The semaphore, idempotency keys, the decorator, and the other kinds of
member (an etcd cluster, a ZooKeeper ensemble, a Redis Cluster) behind the
same client."""

from __future__ import annotations

import asyncio

import pytest

import quorumlock
from quorumlock.asyncio import Redlock as AsyncRedlock


async def test_a_semaphore_admits_at_most_its_permits(urls, name):
    async with AsyncRedlock(urls, wait=10) as locks:
        inside = set()
        most = 0
        indices = set()

        async def use():
            nonlocal most
            async with locks.semaphore(name, permits=3, ttl=5) as permit:
                assert permit.index not in inside
                inside.add(permit.index)
                indices.add(permit.index)
                most = max(most, len(inside))
                await asyncio.sleep(0.05)
                inside.remove(permit.index)

        await asyncio.gather(*(use() for _ in range(8)))
        assert most == 3
        assert indices <= {0, 1, 2}
        taken = [await locks.semaphore(name, permits=3, ttl=5) for _ in range(3)]
        async with locks.try_semaphore(name, permits=3, ttl=5) as none:
            assert none is None
        for permit in taken:
            await permit.release()


async def test_an_idempotency_key_runs_its_operation_once(urls, name):
    async with AsyncRedlock(urls) as locks:
        runs = 0

        async def render():
            nonlocal runs
            runs += 1
            await asyncio.sleep(0.1)
            return '{"invoice": 1001}'

        results = await asyncio.gather(
            *(locks.idempotent(name, render, ttl=5, wait=5, result_ttl=60) for _ in range(5))
        )
        assert runs == 1
        assert results == ['{"invoice": 1001}'] * 5
        raw = await locks.idempotent(name, render, ttl=5, decode=False)
        assert raw == b'{"invoice": 1001}' and runs == 1


async def test_a_failed_operation_is_raised_and_run_again(urls, name):
    async with AsyncRedlock(urls) as locks:
        attempts = 0

        async def flaky():
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                raise ValueError("payment provider down")
            return "paid"

        with pytest.raises(ValueError, match="provider down"):
            await locks.idempotent(name, flaky, ttl=5)
        assert await locks.idempotent(name, flaky, ttl=5) == "paid"
        assert attempts == 2


def test_a_cached_failure_is_given_back_without_running_again(urls, name):
    with quorumlock.Redlock(urls) as locks:
        def fail():
            raise RuntimeError("rejected")

        with pytest.raises(RuntimeError):
            locks.idempotent(name, fail, ttl=5, cache_failures=True)
        with pytest.raises(quorumlock.CachedFailure, match="rejected"):
            locks.idempotent(name, lambda: "never", ttl=5, cache_failures=True)


async def test_synchronized_formats_the_resource_from_the_arguments(urls):
    locks = AsyncRedlock(urls, wait=10)
    running = {}
    overlaps = []

    @locks.synchronized("report:{user_id}", ttl=5)
    async def report(user_id: str, pages: int = 1) -> str:
        running[user_id] = running.get(user_id, 0) + 1
        if running[user_id] > 1:
            overlaps.append(user_id)
        await asyncio.sleep(0.05)
        running[user_id] -= 1
        return f"{user_id}:{pages}"

    started = asyncio.get_running_loop().time()
    results = await asyncio.gather(*(report(user) for user in ["ann", "ann", "ann", "bob"]))
    assert results == ["ann:1", "ann:1", "ann:1", "bob:1"]
    assert not overlaps
    # bob's lock is another resource: it ran beside ann's.
    assert asyncio.get_running_loop().time() - started < 3 * 0.05 + 1.0
    assert report.__name__ == "report"
    await locks.aclose()


def test_synchronized_wraps_plain_functions_with_the_blocking_calls(urls, name):
    with quorumlock.Redlock(urls) as locks:
        @locks.synchronized(lambda order: f"{name}:{order}", ttl=5)
        def ship(order: int) -> bool:
            return locks.try_lock(f"{name}:{order}", ttl=5).acquire() is None

        assert ship(7)

        with pytest.raises(quorumlock.ConfigError):
            @locks.synchronized("x:{missing}", ttl=5)
            def other(order: int) -> None:
                pass

            other(1)


@pytest.mark.parametrize("store", ["etcd_url", "zookeeper_url", "redis_cluster_url"])
async def test_every_kind_of_member_serves_the_same_api(request, store, name):
    url = request.getfixturevalue(store)
    async with AsyncRedlock([url]) as locks:
        assert (locks.nodes, locks.quorum) == (1, 1)
        async with locks.lock(name, ttl=2, fenced=True) as guard:
            assert isinstance(guard.fence, int)
            with pytest.raises(quorumlock.LockHeld):
                await locks.lock(name, ttl=2, wait=0)
            await asyncio.sleep(3)
            assert guard.is_held()
        async with locks.try_lock(name, ttl=2, fenced=True) as again:
            assert again is not None and again.fence > guard.fence
