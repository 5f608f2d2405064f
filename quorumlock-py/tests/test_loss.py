"""What a holder hears when its lock is lost: the async block is cancelled
and raises LockLost; the blocking block raises it at its end; renewals go
on while the event loop is busy, and the loss still reaches the block when
the loop runs again."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

import quorumlock
from quorumlock.asyncio import Redlock as AsyncRedlock

from conftest import wait_until

#: How long a lost lock may take to be noticed: the renewal period of a
#: 1 s ttl is a third of it, and one node round trip more.
NOTICE = 1.0


def take_over(nodes, name):
    """Another owner takes the key on every node (as after a failover or
    an operator's mistake): the holder's next renewal finds it foreign."""
    for node in nodes:
        node.client.set(name, "another-owner", px=30_000)


async def test_a_loss_cancels_the_block_and_raises_lock_lost(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        started = time.monotonic()
        reached_the_end = False
        with pytest.raises(quorumlock.LockLost) as lost:
            async with locks.lock(name, ttl=1) as guard:
                take_over(redis_nodes, name)
                await asyncio.sleep(10)
                reached_the_end = True
        assert not reached_the_end
        assert time.monotonic() - started < 1 + NOTICE
        assert isinstance(lost.value.__cause__, asyncio.CancelledError)
        assert not guard.is_held()
        # The other owner's keys are untouched.
        assert [n.client.get(name) for n in redis_nodes] == ["another-owner"] * 3


async def test_a_loss_is_not_mistaken_for_an_outside_cancellation(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        entered = asyncio.Event()

        async def work():
            async with locks.lock(name, ttl=30):
                entered.set()
                await asyncio.sleep(10)

        task = asyncio.ensure_future(work())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        wait_until("the keys are gone", lambda: [n.client.get(name) for n in redis_nodes] == [None] * 3, timeout=2)


def test_the_blocking_block_raises_lock_lost_at_its_end(urls, redis_nodes, name):
    with quorumlock.Redlock(urls) as locks:
        with pytest.raises(quorumlock.LockLost):
            with locks.lock(name, ttl=1) as guard:
                take_over(redis_nodes, name)
                assert guard.wait_lost(timeout=1 + NOTICE)
                with pytest.raises(quorumlock.LockLost):
                    guard.check()
        assert [n.client.get(name) for n in redis_nodes] == ["another-owner"] * 3


def test_wait_lost_times_out_while_the_lock_is_held(urls, name):
    with quorumlock.Redlock(urls) as locks:
        with locks.lock(name, ttl=1) as guard:
            assert guard.wait_lost(timeout=0.2) is False
            guard.check()


def busy(seconds: float) -> None:
    """Keeps the GIL for ``seconds``: a loop of Python code with the
    interpreter told not to hand the GIL to other threads meanwhile."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(seconds * 10)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(interval)


async def test_renewals_go_on_while_the_event_loop_keeps_the_gil(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        async with locks.lock(name, ttl=0.6) as guard:
            # A pending call whose result Python must take meanwhile.
            other = asyncio.ensure_future(locks.lock(name + ":other", ttl=5))
            busy(2.0)
            assert guard.is_held()
            assert [n.client.get(name) for n in redis_nodes] == [guard.token] * 3
            await (await other).release()


async def test_a_loss_during_a_busy_loop_cancels_the_block_when_it_runs(urls, redis_nodes, name):
    async with AsyncRedlock(urls) as locks:
        after_busy = None
        with pytest.raises(quorumlock.LockLost):
            async with locks.lock(name, ttl=0.6):
                take_over(redis_nodes, name)
                busy(1.5)
                after_busy = time.monotonic()
                await asyncio.sleep(10)
        assert after_busy is not None
        assert time.monotonic() - after_busy < NOTICE
