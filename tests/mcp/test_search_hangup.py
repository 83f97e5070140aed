"""``memory_search`` over MCP's HTTP transport watches its client, as the REST search route
does: a search whose client hangs up while its query waits for the query lane leaves it
unsent and logs ``search.client_gone``. Before, the tool did not watch its client: queued
behind other users' slow queries, it waited for a slot and then sent its query for nobody
(the load drill's failure, ``retrieval.hangup``).

A real ``memstrata serve``; the official SDK client over real HTTP, in both of its eras,
hangs up by closing its connection; two REST searches of other users hold the lane's two
slots (``query_lane.QUERY_SLOTS``) with the embedding API's fault-injection fake in its
slow mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memstrata.retrieval.query_lane import QUERY_SLOTS
from tests.cli.test_shutdown_grace import serving
from tests.mcp.served import SECRET, bearer
from tests.retrieval.fault_server import FaultServer
from tests.served import Served
from tests.waiting import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

SEARCH = "/api/memory/search"
HOLD_S = 4.0  # each held query's time in the fake: far longer than the hang-up takes
ALICE = "zanzibar kettle"  # her query's words, found in no other request


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def sent(fake: FaultServer, words: str) -> int:
    """Texts holding ``words`` the embedding API has been sent so far."""
    return sum(words in t for r in fake.requests for t in r.body.get("input", []))


def rest_search(served: Served, user: str, query: str) -> httpx.Response:
    return httpx.post(served.url + SEARCH, json={"query": query}, headers=bearer(user), timeout=60)


@asynccontextmanager
async def mcp_client(served: Served, user: str, mode: str) -> AsyncIterator[Client]:
    """The official client over HTTP; leaving the block closes its connections."""
    async with httpx2.AsyncClient(headers=bearer(user), timeout=60) as http:
        transport = streamable_http_client(f"{served.url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_search_whose_client_hangs_up_leaves_its_query_unsent(
    tmp_path: Path, pg_url: str, fake: FaultServer, mode: str
) -> None:
    settings = {"EMBEDDING_QUERY_TIMEOUT_S": "30", "EMBEDDING_HEAL": "false"}
    with (
        serving(tmp_path, pg_url, fake, 5, secret=SECRET, **settings) as served,
        ThreadPoolExecutor(QUERY_SLOTS) as pool,
    ):
        fake.mode, fake.delay_s = "slow", HOLD_S
        held = [
            pool.submit(rest_search, served, f"holder{i}", f"lighthouse {i}")
            for i in range(QUERY_SLOTS)
        ]
        wait_for(lambda: sent(fake, "lighthouse") == QUERY_SLOTS, 30, "the lane's slots held")
        async with mcp_client(served, "hangup-alice", mode) as client:
            with anyio.move_on_after(1.0):
                await client.call_tool("memory_search", {"query": ALICE, "top_k": 3})
                pytest.fail("answered while the lane's slots were held")
        # The client is gone; the held queries end, and the lane is free again.
        assert all(h.result(timeout=60).status_code == 200 for h in held)
        fake.delay_s = 0.0
        # A later search queues behind hers, were it still waiting: once it is answered,
        # hers would have been sent.
        assert rest_search(served, "holder-after", "lighthouse after").status_code == 200
        assert sent(fake, ALICE) == 0, served.stderr()
        wait_for(lambda: gone(served), 10, served.stderr)
        [event] = gone(served)
        assert event["stage"] in ("before_embedding", "waiting_for_lane"), event
        assert not served.events("search.embedding_failed"), served.stderr()


def gone(served: Served) -> list[dict[str, Any]]:
    """The hung-up user's ``search.client_gone`` lines."""
    return [e for e in served.events("search.client_gone") if e["user_id"] == "hangup-alice"]
