"""A pool of 10 LLM API keys shared by every worker of a service: each
call takes one of 10 permits of a semaphore and uses the key of its place,
so that no key serves two calls at once and at most 10 run together.

Run: ``python llm_key_pool.py`` (starts local nodes unless
``QUORUMLOCK_NODES`` is set); 30 calls, and it asserts the limits.
"""

from __future__ import annotations

import asyncio

from quorumlock.asyncio import Redlock

from _nodes import local_nodes

KEYS = [f"sk-demo-{i:02d}" for i in range(10)]


async def main() -> None:
    local_nodes()
    async with Redlock.from_env(wait=30) as locks:
        in_use = set()
        most = 0

        async def complete(prompt: str) -> str:
            nonlocal most
            async with locks.semaphore("llm-keys", permits=len(KEYS), ttl=60) as permit:
                key = KEYS[permit.index]
                assert key not in in_use, f"{key} serves two calls"
                in_use.add(key)
                most = max(most, len(in_use))
                await asyncio.sleep(0.05)  # the API call, with this key
                in_use.remove(key)
                return f"{prompt} -> answered with {key}"

        answers = await asyncio.gather(*(complete(f"prompt {i}") for i in range(30)))
        assert len(answers) == 30
        assert most <= len(KEYS), most
        print(f"30 calls, at most {most} at once, no key shared")


if __name__ == "__main__":
    asyncio.run(main())
