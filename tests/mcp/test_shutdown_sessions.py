"""SIGTERM with a tool call in flight on an MCP session's stream (streamable HTTP with
sessions, the SDK's legacy mode): ``memstrata serve`` counts it as a request in flight,
waits for it within ``MEMSTRATA_SHUTDOWN_GRACE_S`` and its answer reaches the client; one
still running after the grace ends its stream with a JSON-RPC error saying the server is
shutting down (the 200 and the event stream have started, so a 503 can no longer be sent).

Before, the SSE library the SDK uses ended every event stream at the signal: the client got
a 200 with an empty body (the SDK: "SSE stream ended without a response") while the write
went on and landed. A real server process on the session's PostgreSQL; the embedding API
is the fault-injection fake in its slow mode, so the call takes as long as the test needs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import text

from memstrata.api.shutdown import SHUTTING_DOWN
from memstrata.db.database import Database
from tests.cli.test_shutdown_grace import serving
from tests.mcp.served import SECRET, bearer
from tests.retrieval.fault_server import FaultServer
from tests.served import Served

pytestmark = pytest.mark.timeout(120)

ACCEPT = "application/json, text/event-stream"
VERSION = "2025-06-18"


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def open_session(client: httpx.Client, url: str, user: str) -> dict[str, str]:
    """Initialize a session as a legacy (2025-06-18) client does; its request headers."""
    headers = {**bearer(user), "Accept": ACCEPT}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    answer = client.post(f"{url}/mcp", json=init, headers=headers)
    assert answer.status_code == 200, answer.text
    headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
    headers["MCP-Protocol-Version"] = VERSION
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert client.post(f"{url}/mcp", json=note, headers=headers).status_code == 202
    return headers


def index_turn(session: str, request_id: int = 7) -> dict[str, Any]:
    arguments = {
        "session_id": session,
        "turn_index": 0,
        "user_message": "a turn about kayaks and tea",
        "assistant_reply": "ok",
    }
    params = {"name": "conversation_index_turn", "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def sse_messages(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


def call_during_sigterm(
    served: Served, fake: FaultServer, user: str, session: str
) -> tuple[httpx.Response, float]:
    """A tool call on a session, SIGTERM once its embedding call is under way; its answer
    and how long after the signal it came."""
    with httpx.Client(timeout=60) as client:
        headers = open_session(client, served.url, user)
        asked = len(fake.requests)
        fake.mode = "slow"
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                client.post, f"{served.url}/mcp", json=index_turn(session), headers=headers
            )
            deadline = time.monotonic() + 10
            while len(fake.requests) == asked and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(fake.requests) > asked, "the tool call never called the embedding API"
            served.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            response = answer.result(timeout=60)
            return response, time.monotonic() - signalled


def stored_turns(db: Database, user: str) -> int:
    with db.engine.connect() as conn:
        query = text("SELECT count(*) FROM memory_embeddings WHERE user_id = :u")
        return int(conn.execute(query, {"u": user}).scalar_one())


def test_a_session_tool_call_within_the_grace_is_answered(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database
) -> None:
    fake.delay_s = 2.0  # per text: the call embeds for 2 s or more, the grace is 15 s
    with serving(tmp_path, pg_url, fake, grace_s=15, secret=SECRET) as served:
        response, after_s = call_during_sigterm(served, fake, "mcp-ana", "s-ana")

        assert response.status_code == 200, response.text
        [message] = sse_messages(response.text)
        assert message["id"] == 7
        assert "result" in message, message
        assert message["result"]["isError"] is False, message
        assert after_s >= 1.0, "answered before the embedding call ended"
        assert served.process.wait(timeout=30) == 0, served.stderr()
        [started] = served.events("shutdown.started")
        assert started["requests_in_flight"] == 1, served.stderr()
        assert served.events("http.cut_off_by_shutdown") == []
    assert stored_turns(db, "mcp-ana") > 0


def test_a_session_tool_call_outlasting_the_grace_gets_the_shutdown_refusal(
    tmp_path: Path, pg_url: str, fake: FaultServer
) -> None:
    fake.delay_s = 6.0  # per text: the call embeds for 6 s or more, the grace is 1 s
    with serving(tmp_path, pg_url, fake, grace_s=1, secret=SECRET) as served:
        response, after_s = call_during_sigterm(served, fake, "mcp-bo", "s-bo")

        assert response.status_code == 200, response.text  # the stream had started
        [message] = sse_messages(response.text)
        assert message["id"] == 7
        assert message["error"]["message"] == SHUTTING_DOWN
        assert message["error"]["data"]["code"] == "shutting_down"
        assert after_s < 6.0, "answered after the embedding: nothing was cut off"
        assert served.process.wait(timeout=30) == 0, served.stderr()
        [started] = served.events("shutdown.started")
        assert started["requests_in_flight"] == 1, served.stderr()
        cut = served.events("http.cut_off_by_shutdown")
        assert [(e["method"], e["user_id"]) for e in cut] == [("POST", "mcp-bo")], served.stderr()


def test_an_open_get_stream_does_not_hold_up_the_shutdown(
    tmp_path: Path, pg_url: str, fake: FaultServer
) -> None:
    """A session's standalone GET stream has no request in flight: it ends at the signal,
    and the server stops at once rather than after the grace."""
    with serving(tmp_path, pg_url, fake, grace_s=15, secret=SECRET) as served:
        with httpx.Client(timeout=60) as client:
            headers = open_session(client, served.url, "mcp-cy")
            with client.stream("GET", f"{served.url}/mcp", headers=headers) as stream:
                assert stream.status_code == 200
                time.sleep(0.3)
                served.process.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                stream.read()
                ended_s = time.monotonic() - signalled
        assert served.process.wait(timeout=30) == 0, served.stderr()
        assert ended_s < 5.0


async def sdk_call_during_sigterm(served: Served, fake: FaultServer, user: str) -> Any:
    """The official SDK client in legacy mode (sessions): a tool call, SIGTERM once its
    embedding call is under way; the call's result, or the MCPError it raised."""
    outcome: list[Any] = []
    try:
        async with (
            httpx2.AsyncClient(headers=bearer(user), timeout=60) as http,
            Client(
                streamable_http_client(f"{served.url}/mcp", http_client=http), mode="legacy"
            ) as c,
        ):
            await c.list_tools()  # what it checks a result against, before the server stops
            asked = len(fake.requests)
            fake.mode = "slow"
            arguments = index_turn(f"sdk-{user}")["params"]["arguments"]
            call = asyncio.create_task(c.call_tool("conversation_index_turn", arguments))
            deadline = time.monotonic() + 10
            while len(fake.requests) == asked and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert len(fake.requests) > asked, "the tool call never called the embedding API"
            served.process.send_signal(signal.SIGTERM)
            try:
                outcome.append(await asyncio.wait_for(call, 60))
            except MCPError as exc:
                outcome.append(exc)
    except* httpx2.ConnectError:
        pass  # the client's goodbye (its GET stream, its DELETE) finds the server stopped
    [result] = outcome
    return result


@pytest.mark.anyio
async def test_the_sdk_client_gets_its_answer_or_the_shutdown_refusal(
    tmp_path: Path, pg_url: str, fake: FaultServer
) -> None:
    fake.delay_s = 2.0  # within a 15 s grace: answered
    with serving(tmp_path / "a", pg_url, fake, grace_s=15, secret=SECRET) as served:
        result = await sdk_call_during_sigterm(served, fake, "sdk-ana")
        assert not isinstance(result, MCPError), result
        assert result.is_error is False, result
        assert served.process.wait(timeout=30) == 0, served.stderr()
    fake.delay_s = 6.0  # past a 1 s grace: the refusal, not "SSE stream ended"
    with serving(tmp_path / "b", pg_url, fake, grace_s=1, secret=SECRET) as served:
        result = await sdk_call_during_sigterm(served, fake, "sdk-bo")
        assert isinstance(result, MCPError), result
        assert str(result) == SHUTTING_DOWN
        assert served.process.wait(timeout=30) == 0, served.stderr()
