"""``MEMSTRATA_MCP_STATELESS``: every tool, resource and prompt test again, over real HTTP.

Each test of ``test_tools`` and ``test_resources_prompt`` runs here a second time, with
``connect`` bound to the SDK's streamable HTTP client (the handshake-era ``legacy`` mode,
the one that opens sessions, unless a test asks for another) against the app under uvicorn
in stateless mode, on the same real runtime. Every response is checked to hand out no
``Mcp-Session-Id``. Then the per-user session cap: in stateless mode there are no sessions,
so it neither counts nor refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memstrata.api import create_app
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.mcp import test_resources_prompt, test_tools
from tests.mcp.conftest import ClientFactory
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.reliability.harness import serve

pytestmark = pytest.mark.anyio

for _module in (test_tools, test_resources_prompt):
    for _name, _test in vars(_module).items():
        if _name.startswith("test_") and callable(_test):
            globals()[_name] = _test


@contextmanager
def running(mem: Memstrata, **update: Any) -> Iterator[str]:
    """``memstrata serve``'s app in stateless mode with ``update`` applied; the base URL."""
    settings = mem.settings.model_copy(update={"web_ui": False, "mcp_stateless": True, **update})
    with serve(create_app(settings, memstrata=mem)) as url:
        yield url


def bearer(settings: Settings, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(settings, user, 600)}"}


@asynccontextmanager
async def stateless_client(
    url: str, headers: dict[str, str], mode: str = "legacy", **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client; fails the test if any response opens a session."""

    async def no_session(response: httpx2.Response) -> None:
        assert "mcp-session-id" not in response.headers, response.headers

    hooks = {"response": [no_session]}
    async with httpx2.AsyncClient(headers=headers, timeout=60, event_hooks=hooks) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            yield client


def skills_list(request_id: int) -> dict[str, Any]:
    """A tools/call that needs no session (stateless: no initialize first)."""
    params = {"name": "skills_list", "arguments": {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@pytest.fixture
def connect(mem: Memstrata) -> Iterator[ClientFactory]:
    """``async with connect("alice") as client`` — over stateless HTTP, as that user's
    token; one server per runtime a test uses, stopped at the end of the test."""
    with ExitStack() as servers:
        urls: dict[int, str] = {}

        @asynccontextmanager
        async def factory(
            user: str = "alice", runtime: Memstrata | None = None, **options: Any
        ) -> AsyncIterator[Client]:
            chosen = runtime or mem
            if id(chosen) not in urls:
                urls[id(chosen)] = servers.enter_context(running(chosen))
            headers = bearer(chosen.settings, user)
            async with stateless_client(urls[id(chosen)], headers, **options) as client:
                yield client

        yield factory


async def test_the_session_cap_neither_counts_nor_refuses(mem: Memstrata) -> None:
    """With a cap of one session per user, stateless: any number of clients and
    initializes at once, each answered without a session; a stale ``Mcp-Session-Id`` (from a
    replica in session mode) is not refused either."""
    alice = bearer(mem.settings, "stateless-alice")
    with running(mem, mcp_max_sessions_per_user=1) as url:
        async with AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(stateless_client(url, alice)) for _ in range(3)
            ]
            for index, client in enumerate(clients):
                recorded = await client.call_tool("record_memory", {"content": f"Fact {index}"})
                assert not recorded.is_error, recorded.content
            for _ in range(3):
                opened = httpx.post(f"{url}/mcp", headers={**MCP_HEADERS, **alice}, json=INIT)
                assert opened.status_code == 200, opened.text
                assert "mcp-session-id" not in opened.headers
            stale = {"mcp-session-id": "0" * 32, "mcp-protocol-version": "2025-06-18"}
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            answered = httpx.post(
                f"{url}/mcp", headers={**MCP_HEADERS, **alice, **stale}, json=ping
            )
            assert answered.status_code == 200, answered.text
            read = await clients[0].call_tool("memory_read", {"name": "memory"})
        # A burst: with the ledger in the way, each request without an Mcp-Session-Id would
        # take the one slot until its answer starts, and the others would get 429.
        async with httpx.AsyncClient(headers={**MCP_HEADERS, **alice}, timeout=60) as http:
            calls = [http.post(f"{url}/mcp", json=skills_list(i)) for i in range(40)]
            statuses = [response.status_code for response in await asyncio.gather(*calls)]
        assert statuses == [200] * 40
        content = (read.structured_content or {})["content"]
        assert all(f"Fact {i}" in content for i in range(3)), content
