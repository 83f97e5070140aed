"""Two real ``memstrata serve`` replicas on one PostgreSQL behind a round-robin balancer.

Session mode (the default): a session made by ``initialize`` lives only in the process
that opened it, so the other replica answers 404 "Session not found" — replicas need
affinity on the ``Mcp-Session-Id`` header. ``MEMSTRATA_MCP_STATELESS=true``: every
request stands alone, and one client's requests may alternate between the replicas.
The balancer here is the client's own transport, sending each request to the next
replica in turn (keeping the ``Host`` header, as a load balancer does).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from subprocess import Popen

import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.mcp.messages import INIT, MCP_HEADERS

pytestmark = pytest.mark.anyio

SECRET = "mcp-replica-test-secret-0123456789abcdef"


def bearer(user: str) -> dict[str, str]:
    token = jwt.encode({"sub": user, "exp": int(time.time()) + 600}, SECRET, "HS256")
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def replicas(request: pytest.FixtureRequest, tmp_path: Path, pg_url: str) -> Iterator[list[int]]:
    """Two ``memstrata serve`` processes on one database; their ports. The parameter sets
    MEMSTRATA_MCP_STATELESS, which each replica must know as a setting (no
    ``config.unknown_variable`` warning in its log)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_JWT_SECRET": SECRET,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_LOG_LEVEL": "WARNING",
        "MEMSTRATA_MCP_STATELESS": str(request.param).lower(),
    }
    ports = [free_port(), free_port()]
    started: list[Popen[bytes]] = []
    try:
        for index, port in enumerate(ports):
            data = {"MEMSTRATA_DATA_DIR": str(tmp_path / f"replica-{index}")}
            log = (tmp_path / f"replica-{index}.log").open("w")
            started.append(start_serve({**env, **data}, port, stderr=log))
            log.close()  # the process has its own copy
        for index, (process, port) in enumerate(zip(started, ports, strict=True)):
            log_path = tmp_path / f"replica-{index}.log"
            wait_ready(process, f"http://127.0.0.1:{port}", timeout_s=90, output=log_path.read_text)
            assert "unknown_variable" not in log_path.read_text(), log_path.read_text()
        yield ports
    finally:
        for process in started:
            stop_serve(process)


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each request to the next replica's port; ``sent`` records which one took it."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = itertools.cycle(ports)
        self.inner = httpx2.AsyncHTTPTransport()
        self.sent: list[tuple[str, int, int]] = []  # (method, port, status)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        request.url = request.url.copy_with(port=port)
        response = await self.inner.handle_async_request(request)
        self.sent.append((request.method, port, response.status_code))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def balanced_client(
    ports: list[int], user: str, mode: str = "legacy"
) -> AsyncIterator[tuple[Client, RoundRobin]]:
    balancer = RoundRobin(ports)
    async with httpx2.AsyncClient(headers=bearer(user), timeout=60, transport=balancer) as http:
        url = f"http://127.0.0.1:{ports[0]}/mcp"
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client, balancer


def post(port: int, user: str, body: dict[str, object], **headers: str) -> httpx.Response:
    url = f"http://127.0.0.1:{port}/mcp"
    return httpx.post(url, headers={**MCP_HEADERS, **bearer(user), **headers}, json=body)


PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
IN_SESSION = {"mcp-protocol-version": "2025-06-18"}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("replicas", [True], indirect=True, ids=["stateless"])
async def test_stateless_requests_alternate_between_replicas(replicas: list[int]) -> None:
    a, b = replicas
    async with balanced_client(replicas, "replica-alice") as (client, balancer):
        assert len((await client.list_tools()).tools) == 9
        for index in range(3):
            written = await client.call_tool("record_memory", {"content": f"Rows boat {index}"})
            assert not written.is_error, written.content
        found = await client.call_tool("memory_search", {"query": "boat", "top_k": 5})
        read = await client.read_resource("memstrata://files/memory")
        prompt = await client.get_prompt("memory_context", {"token_limit": "32000"})
    assert not found.is_error and "Rows boat" in (found.structured_content or {})["hits"][0]["text"]
    for text in (read.contents[0].text, prompt.messages[0].content.text):  # type: ignore[union-attr]
        assert all(f"Rows boat {i}" in text for i in range(3)), text
    # the handshake (initialize, then its notification) and every call went to both
    methods = [method for method, _, _ in balancer.sent]
    assert set(methods) == {"POST"}, balancer.sent  # no GET stream, no DELETE: no session
    assert {port for _, port, _ in balancer.sent} == {a, b}
    assert all(status < 300 for _, _, status in balancer.sent), balancer.sent

    opened = post(a, "replica-alice", INIT)
    assert opened.status_code == 200 and "mcp-session-id" not in opened.headers
    assert post(b, "replica-alice", PING, **IN_SESSION).status_code == 200


@pytest.mark.timeout(240)
@pytest.mark.parametrize("replicas", [False], indirect=True, ids=["sessions"])
async def test_a_session_is_only_known_to_the_replica_that_opened_it(
    replicas: list[int],
) -> None:
    a, b = replicas
    opened = post(a, "replica-bob", INIT)
    assert opened.status_code == 200
    session = {"mcp-session-id": opened.headers["mcp-session-id"], **IN_SESSION}
    elsewhere = post(b, "replica-bob", PING, **session)
    assert elsewhere.status_code == 404
    assert elsewhere.json()["error"]["message"].startswith("Session not found: ")
    assert elsewhere.json()["code"] == "not_found"
    assert post(a, "replica-bob", PING, **session).status_code == 200  # affinity works

    # The SDK's client behind the round-robin balancer: its session breaks on replica B.
    with pytest.raises(BaseExceptionGroup) as raised:
        async with balanced_client(replicas, "replica-bob") as (client, _):
            await client.list_tools()
    assert raised.group_contains(MCPError, match="Session not found")

    # A client on the 2026-07-28 protocol opens no session: any replica answers it.
    async with balanced_client(replicas, "replica-bob", mode="auto") as (client, balancer):
        for _ in range(2):
            assert len((await client.list_tools()).tools) == 9
    assert {port for _, port, _ in balancer.sent} == {a, b}
