"""The ``Idempotency-Key`` header: a client retries a payment whose reply it
never got; the retries, on any instance of the service, return the first
call's result instead of charging again.

Run: ``python idempotency_key.py`` (starts local nodes unless
``QUORUMLOCK_NODES`` is set); it sends the same request five times at once
and twice more, and asserts one charge.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, Request
from fastapi.responses import Response

from quorumlock.asyncio import Redlock

from _nodes import local_nodes

charges = []


@asynccontextmanager
async def lifespan(app: FastAPI):
    app.state.locks = Redlock.from_env()
    yield
    await app.state.locks.aclose()


app = FastAPI(lifespan=lifespan)


@app.post("/payments")
async def pay(request: Request, idempotency_key: str = Header()) -> Response:
    locks: Redlock = request.app.state.locks
    order = await request.json()

    async def charge() -> str:
        await asyncio.sleep(0.2)  # the payment provider
        charges.append(order["amount"])
        return json.dumps({"charged": order["amount"], "charge": len(charges)})

    body = await locks.idempotent(
        f"payment:{idempotency_key}", charge, ttl=30, wait=10, result_ttl=24 * 3600
    )
    return Response(body, media_type="application/json")


async def main() -> None:
    import httpx

    local_nodes()
    transport = httpx.ASGITransport(app=app)
    headers = {"Idempotency-Key": "order-1001-attempt"}
    async with lifespan(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
            pay_once = lambda: http.post("/payments", json={"amount": 42}, headers=headers)
            replies = await asyncio.gather(*(pay_once() for _ in range(5)))
            replies += [await pay_once(), await pay_once()]
    bodies = {reply.text for reply in replies}
    assert all(reply.status_code == 200 for reply in replies)
    assert len(bodies) == 1 and charges == [42], (bodies, charges)
    print(f"7 requests with one Idempotency-Key: one charge, every reply {bodies.pop()}")


if __name__ == "__main__":
    asyncio.run(main())
