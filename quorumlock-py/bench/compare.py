"""The asyncio client against Python's Redis locks, on the same local nodes
in one run: lock + release latency (p50) and the cycles per second of 64
tasks, each on a resource of its own.

- redis-py's asyncio ``Lock`` (one node);
- the brief's ``distributed_lock``: redis-py, ``SET NX EX``, a watchdog
  task, and the Lua release (one node);
- pottery's ``AIORedlock`` (a quorum of N nodes, N = 1, 3, 5);
- quorumlock's ``quorumlock.asyncio.Redlock`` at N = 1, 3, 5.

Run: ``python quorumlock-py/bench/compare.py`` (a markdown table on
stdout, with the ratios the targets are judged on); ``--smoke`` runs tiny
counts to keep the code from rotting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from typing import Awaitable, Callable, Dict, List, Tuple

import redis.asyncio as aioredis
from pottery import AIORedlock

from quorumlock.asyncio import Redlock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from _nodes import local_nodes  # noqa: E402

#: The ttl of every lock taken (seconds): long, so that none expires.
TTL = 10
#: Tasks of the throughput runs.
TASKS = 64


@asynccontextmanager
async def distributed_lock(redis: aioredis.Redis, lock_key: str, timeout: int = 30):
    """The brief's lock, as it is written there: SET NX EX, a watchdog that
    extends every timeout / 3, and an owner-checked Lua release."""
    lock_value = str(uuid.uuid4())
    locked = await redis.set(lock_key, lock_value, nx=True, ex=timeout)
    if not locked:
        yield False
        return

    async def watchdog():
        while True:
            await asyncio.sleep(timeout / 3)
            await redis.pexpire(lock_key, timeout * 1000)

    watchdog_task = asyncio.create_task(watchdog())
    try:
        yield True
    finally:
        watchdog_task.cancel()
        lua = """
        if redis.call('get', KEYS[1]) == ARGV[1] then
            return redis.call('del', KEYS[1])
        else
            return 0
        end
        """
        await redis.eval(lua, 1, lock_key, lock_value)


Cycle = Callable[[str], Awaitable[None]]


async def contenders(urls: List[str]) -> Tuple[Dict[str, Cycle], Callable[[], Awaitable[None]]]:
    """Each contender's lock + release cycle on a key, and what closes
    their clients."""
    one = aioredis.from_url(urls[0])
    masters = [aioredis.from_url(url) for url in urls]
    ours = {n: Redlock(urls[:n], wait=0) for n in (1, 3, 5)}

    async def redis_py(key: str) -> None:
        lock = one.lock(key, timeout=TTL)
        assert await lock.acquire(blocking=False)
        await lock.release()

    async def brief(key: str) -> None:
        async with distributed_lock(one, key, TTL) as acquired:
            assert acquired

    def pottery(n: int) -> Cycle:
        async def cycle(key: str) -> None:
            lock = AIORedlock(key=key, masters=set(masters[:n]), auto_release_time=TTL)
            assert await lock.acquire(blocking=False)
            await lock.release()

        return cycle

    def quorumlock(n: int) -> Cycle:
        async def cycle(key: str) -> None:
            guard = await ours[n].lock(key, TTL)
            await guard.release()

        return cycle

    async def quorumlock_block(key: str) -> None:
        # What a user writes: the block, its loss watcher and the release.
        async with ours[1].lock(key, TTL):
            pass

    async def close() -> None:
        for client in [one, *masters]:
            await client.aclose()
        for ours_client in ours.values():
            await ours_client.aclose()

    table: Dict[str, Cycle] = {"redis-py Lock N=1": redis_py, "brief distributed_lock N=1": brief}
    for n in (1, 3, 5):
        table[f"pottery AIORedlock N={n}"] = pottery(n)
    for n in (1, 3, 5):
        table[f"quorumlock N={n}"] = quorumlock(n)
    table["quorumlock N=1, async with"] = quorumlock_block
    return table, close


async def latency(cycle: Cycle, rounds: int) -> float:
    """The median lock + release time in µs, one task, a fresh key a cycle."""
    samples = []
    for i in range(rounds):
        key = f"bench:lat:{uuid.uuid4().hex}"
        started = time.perf_counter()
        await cycle(key)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


async def throughput(cycle: Cycle, seconds: float) -> float:
    """Cycles per second of TASKS tasks, each on a key of its own."""
    done = 0
    stop = time.perf_counter() + seconds

    async def task(i: int) -> None:
        nonlocal done
        key = f"bench:thr:{i}:{uuid.uuid4().hex}"
        while time.perf_counter() < stop:
            await cycle(key)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(TASKS)))
    return done / (time.perf_counter() - started)


async def run(rounds: int, window: float, repeats: int) -> List[Tuple[str, float, float]]:
    urls = local_nodes(5)
    table, close = await contenders(urls)
    results = []
    for name, cycle in table.items():
        for _ in range(10):  # warm-up: connections, scripts loaded
            await cycle(f"bench:warm:{uuid.uuid4().hex}")
        p50 = statistics.median([await latency(cycle, rounds) for _ in range(repeats)])
        rate = statistics.median([await throughput(cycle, window) for _ in range(repeats)])
        results.append((name, p50, rate))
        print(f"  {name}: p50 {p50:.0f} µs, {rate:,.0f} cycles/s x{TASKS}", file=sys.stderr)
    await close()
    return results


async def one_round_trip(rounds: int) -> List[Tuple[str, float]]:
    """What one awaited call costs, beside the round trip it makes: a
    redis-py ``GET`` and a quorumlock ``try_lock`` the node refuses (one
    ``SET NX PX`` each), p50 in µs, on one node."""
    url = local_nodes(5)[0]
    redis = aioredis.from_url(url)
    locks = Redlock([url], wait=0)
    holder = Redlock([url])
    held = await holder.lock("bench:held", TTL)
    calls = {
        "redis-py GET": lambda key: redis.get("bench:held"),
        "quorumlock try_lock, refused": lambda key: locks.try_lock("bench:held", TTL).acquire(),
    }
    results = []
    for name, call in calls.items():
        for _ in range(10):
            await call("")
        results.append((name, await latency(call, rounds)))
    await held.release()
    for client in (locks, holder):
        await client.aclose()
    await redis.aclose()
    return results


def report(results: List[Tuple[str, float, float]]) -> str:
    by_name = {name: (p50, rate) for name, p50, rate in results}
    lines = ["| client | lock + release p50 | 64 tasks, cycles/s |", "|---|---:|---:|"]
    for name, p50, rate in results:
        lines.append(f"| {name} | {p50:.0f} µs | {rate:,.0f} |")
    ours1, brief, redis_py = by_name["quorumlock N=1"], by_name["brief distributed_lock N=1"], by_name["redis-py Lock N=1"]
    lines.append("")
    lines.append(f"- N=1 p50: {ours1[0] / brief[0]:.2f}x the brief's `distributed_lock` (target at most 1.0x), "
                 f"{ours1[0] / redis_py[0]:.2f}x redis-py's `Lock`")
    lines.append(f"- N=1 throughput with 64 tasks: {ours1[1] / redis_py[1]:.2f}x redis-py's `Lock` (target at least 3x)")
    for n in (3, 5):
        ours, pottery = by_name[f"quorumlock N={n}"], by_name[f"pottery AIORedlock N={n}"]
        lines.append(f"- N={n} p50: {ours[0] / pottery[0]:.2f}x pottery's `AIORedlock` (target at most 0.4x)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny counts: the code runs")
    args = parser.parse_args()
    rounds, window, repeats = (20, 0.2, 1) if args.smoke else (2000, 3.0, 3)
    results = asyncio.run(run(rounds, window, repeats))
    print(report(results))
    print()
    print("| one round trip | p50 |")
    print("|---|---:|")
    for name, p50 in asyncio.run(one_round_trip(rounds)):
        print(f"| {name} | {p50:.0f} µs |")


if __name__ == "__main__":
    main()
