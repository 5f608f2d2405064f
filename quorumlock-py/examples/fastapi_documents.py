"""One worker per uploaded document: three instances of a FastAPI service
behind a load balancer must not process the same document at once. A
request for a document that is being processed gets 423 Locked at once.

The client is made in the app's lifespan (one per process, closed at
shutdown: the locks it still holds are released). The lock is renewed
while the work runs; if it is lost anyway, the work is cancelled and the
request fails with 503 instead of finishing a job someone else now owns.

Run: ``python fastapi_documents.py`` (starts local nodes unless
``QUORUMLOCK_NODES`` is set); it asserts the 423 and the 200.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request

import quorumlock
from quorumlock.asyncio import Redlock

from _nodes import local_nodes


@asynccontextmanager
async def lifespan(app: FastAPI):
    app.state.locks = Redlock.from_env(wait=0)
    yield
    await app.state.locks.aclose()


app = FastAPI(lifespan=lifespan)


async def process(document_id: int) -> dict:
    await asyncio.sleep(0.5)  # OCR, thumbnails, indexing...
    return {"document": document_id, "status": "processed"}


@app.post("/documents/{document_id}/process")
async def process_document(document_id: int, request: Request) -> dict:
    locks: Redlock = request.app.state.locks
    try:
        async with locks.lock(f"document:{document_id}", ttl=30):
            return await process(document_id)
    except quorumlock.LockHeld:
        raise HTTPException(status_code=423, detail="this document is being processed")
    except quorumlock.LockLost:
        raise HTTPException(status_code=503, detail="lost the document's lock; try again")


async def main() -> None:
    import httpx

    local_nodes()
    transport = httpx.ASGITransport(app=app)
    async with lifespan(app):
        async with httpx.AsyncClient(transport=transport, base_url="http://documents") as http:
            first, second = await asyncio.gather(
                http.post("/documents/1001/process"),
                http.post("/documents/1001/process"),
            )
            codes = sorted([first.status_code, second.status_code])
            assert codes == [200, 423], codes
            again = await http.post("/documents/1001/process")
            assert again.status_code == 200, again.text
            print("document 1001: one 200, one 423 while it ran, then 200")


if __name__ == "__main__":
    asyncio.run(main())
