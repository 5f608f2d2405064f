"""Cancellation, collection, event loops, threads, fork and pickling: the
lifecycle a Python program puts a lock through."""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import random
import threading
import time

import pytest

import quorumlock
from quorumlock.asyncio import Redlock as AsyncRedlock

from conftest import wait_until

#: Long enough that a key gone before it was deleted, not expired.
LONG_TTL = 30


def gone(nodes, name):
    return lambda: all(node.client.get(name) is None for node in nodes)


async def test_cancelled_waiters_leave_no_key(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        holder = await locks.lock(name, ttl=LONG_TTL)
        waiters = [asyncio.ensure_future(locks.lock(name, ttl=LONG_TTL, wait=10)) for _ in range(20)]
        rng = random.Random(7)
        release_at = rng.randrange(len(waiters))
        for i, waiter in enumerate(waiters):
            if i == release_at:
                await holder.release()
            await asyncio.sleep(rng.uniform(0, 0.01))
            waiter.cancel()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        for result in results:
            if isinstance(result, quorumlock.asyncio.Guard):
                # Granted before its cancellation landed: its to give back.
                await result.release()
        wait_until("the cancelled waiters' keys are gone", gone(redis_nodes, name), timeout=5)
        async with locks.try_lock(name, ttl=5) as guard:
            assert guard is not None


async def test_a_second_cancellation_does_not_skip_the_release(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        entered = asyncio.Event()

        async def work():
            async with locks.lock(name, ttl=LONG_TTL):
                entered.set()
                await asyncio.sleep(10)

        task = asyncio.ensure_future(work())
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0)  # the block ends; its exit awaits the release
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        wait_until("the key is released", gone(redis_nodes, name), timeout=2)


def test_a_collected_guard_is_released(urls, redis_nodes, name):
    with quorumlock.Redlock(urls) as locks:
        guard = locks.lock(name, ttl=LONG_TTL).acquire()
        token = guard.token
        wait_until("every node holds it", lambda: all(node.client.get(name) == token for node in redis_nodes), timeout=2)
        del guard
        gc.collect()
        wait_until("the collected guard's key is released", gone(redis_nodes, name), timeout=2)


def test_one_client_serves_several_event_loops(urls, name):
    locks = AsyncRedlock(urls)

    async def take():
        async with locks.lock(name, ttl=5) as guard:
            return guard.token

    first = asyncio.run(take())
    second = asyncio.run(take())
    assert first != second
    asyncio.run(locks.aclose())


async def test_a_blocking_call_on_an_event_loop_thread_is_refused(urls, name):
    locks = quorumlock.Redlock(urls)
    with pytest.raises(RuntimeError, match="asyncio"):
        locks.lock(name, ttl=5).acquire()
    with pytest.raises(RuntimeError, match="asyncio"):
        locks.close()
    await asyncio.get_running_loop().run_in_executor(None, locks.close)


def test_threads_share_a_blocking_client_and_exclude_each_other(urls, name):
    with quorumlock.Redlock(urls, wait=10) as locks:
        inside = []
        overlaps = []

        def work():
            for _ in range(5):
                with locks.lock(name, ttl=5):
                    inside.append(1)
                    if len(inside) > 1:
                        overlaps.append(1)
                    time.sleep(0.005)
                    inside.pop()

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads)
        assert not overlaps


def run_in_child(body) -> int:
    """Forks; the child runs ``body`` and exits with its return value (1
    if it raised). The parent waits at most 20 s, so that a hang fails."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_child_refuses_the_parents_client_and_makes_its_own(urls, redis_nodes, name):
    locks = quorumlock.Redlock(urls)
    # The only reference to the guard, so that the child can drop its copy.
    guards = [locks.lock(name, ttl=LONG_TTL).acquire()]

    def child() -> int:
        try:
            locks.lock(name + ":child", ttl=5).acquire()
            return 2
        except quorumlock.ClientClosed as refused:
            if "fork" not in str(refused):
                return 3
        guards.clear()
        gc.collect()
        with quorumlock.Redlock(urls) as own:
            with own.lock(name + ":child", ttl=5) as guard:
                if not guard.is_held():
                    return 4
            if own.try_lock(name, ttl=5).acquire() is not None:
                return 5  # the parent's lock must still be held
        return 0

    assert run_in_child(child) == 0
    held = guards[0]
    # The child's copy of the guard, collected there, released nothing.
    wait_until("every node holds it", lambda: all(node.client.get(name) == held.token for node in redis_nodes), timeout=2)
    assert held.is_held()
    held.release()
    locks.close()


def test_clients_and_guards_cannot_be_pickled(urls, name):
    with quorumlock.Redlock(urls) as locks:
        with pytest.raises(TypeError, match="pickle"):
            pickle.dumps(locks)
        with locks.lock(name, ttl=5) as guard:
            with pytest.raises(TypeError, match="pickle"):
                pickle.dumps(guard)
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(AsyncRedlock(urls))
