"""memstrata's REST router mounted at ``/memory`` in a bare host app (none of memstrata's
middleware or error handlers), as an integrator mounts it, with an async client. The app
runs in the test's own event loop (httpx's ASGI transport), so a test bounds its waits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from memstrata.api import create_router
from memstrata.runtime import Memstrata


@asynccontextmanager
async def mounted(mem: Memstrata) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``mem``'s router (base URL ``http://host``); closes ``mem`` after."""
    app = FastAPI()
    app.include_router(create_router(mem, include_operations=False), prefix="/memory")
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
            yield client
    finally:
        mem.close()  # the pool only; the session database stays up
