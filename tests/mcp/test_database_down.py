"""With PostgreSQL unreachable, MCP answers what REST answers: the database is unavailable,
try again; never the driver's text (which names the database's host and port).

A real runtime whose engine points at a loopback port that refuses connections (a socket
bound there that never listens), driven by the SDK's client in process, over streamable
HTTP (both protocol eras) and over stdio (``memstrata mcp`` as a real process, its
database reached through a proxy that is then shut). Resources and prompts answer a
JSON-RPC error, tools an ``isError`` result, each with the REST API's message; the
driver's text goes to the log only, as a WARNING with the user and no traceback.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, TextContent
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from memstrata.api import create_app
from memstrata.api.context import ApiContext
from memstrata.api.errors import ApiError, map_exception
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.logs import event_fields
from memstrata.mcp import build_server
from memstrata.runtime import Memstrata
from tests.cli.cli_env import start_mcp
from tests.mcp.messages import INIT
from tests.reliability.harness import serve
from tests.tcp_proxy import TcpProxy as ShutProxy

pytestmark = pytest.mark.anyio

MEMORY_URI = "memstrata://files/memory"
PROMPT_ARGS = {"token_limit": "32000"}
TURN = {"session_id": "s1", "turn_index": 0, "user_message": "hi", "assistant_reply": "hello"}
# A valid call of every tool: each needs the database.
TOOL_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("memory_search", {"query": "bees"}),
    ("memory_read", {"name": "memory"}),
    ("memory_write", {"name": "soul", "content": "# SOUL.md\n", "expected_version": 0}),
    ("record_memory", {"content": "Keeps bees"}),
    ("update_long_term_memory", {"content": "Keeps bees", "whole_file": True}),
    ("update_user", {"section": "Profile", "content": "Keeps bees"}),
    ("conversation_index_turn", TURN),
    ("skills_list", {}),
    ("skill_set", {"skill_name": "web_search", "enabled": True}),
]


def rest_message() -> str:
    """What REST says about an unreachable database (its 503 ``database_unavailable``)."""
    mapped = map_exception(OperationalError("SELECT 1", {}, Exception("refused")))
    assert mapped is not None and mapped.body["code"] == "database_unavailable"
    return str(mapped.body["message"])


def assert_hidden(answer: str, port: int) -> None:
    """No driver text in an answer: not its exception, not the database's address."""
    for internal in ("OperationalError", "psycopg", "127.0.0.1", f"port {port}", str(port)):
        assert internal not in answer, answer


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port bound for the test but never listening: connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def down(settings: Settings, refused_port: int) -> Iterator[Memstrata]:
    """The real runtime (no embedding API), its database unreachable."""
    engine = make_engine(f"postgresql+psycopg://memstrata@127.0.0.1:{refused_port}/memstrata")
    runtime = Memstrata.open(
        settings, database=Database(engine, make_session_factory(engine)), embedder=None
    )
    yield runtime
    runtime.close()


def failures(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The structured MCP failure events logged so far (tool calls and requests)."""
    events = [event_fields(r) | {"level": r.levelno} for r in caplog.records]
    return [e for e in events if e.get("event") in ("mcp.tool", "mcp.request")]


def assert_logged(caplog: pytest.LogCaptureFixture, user: str, port: int) -> None:
    """Each failure is one WARNING with the user and the driver's text as its cause, and
    no line of the outage carries a traceback."""
    logged = failures(caplog)
    assert logged, [r.getMessage() for r in caplog.records]
    for event in logged:
        assert event["level"] == logging.WARNING, event
        assert event["user_id"] == user, event
        assert event["code"] == "database_unavailable", event
        assert "OperationalError" in event["cause"] and str(port) in event["cause"], event
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


async def test_in_process(
    down: Memstrata, refused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The resource, the prompt and every tool, through the SDK's in-process client
    (where the SDK answered "Internal server error")."""
    caplog.set_level(logging.INFO, logger="memstrata")
    message = rest_message()
    server = build_server(lambda: down, lambda _ctx: "down-alice")
    async with Client(server) as client:
        with pytest.raises(MCPError) as read:
            await client.read_resource(MEMORY_URI)
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("memory_context", PROMPT_ARGS)
        results = [await client.call_tool(name, args) for name, args in TOOL_CALLS]
        listed = (await client.list_tools()).tools  # the session goes on
    assert sorted(name for name, _ in TOOL_CALLS) == sorted(tool.name for tool in listed)
    for raised in (read.value, prompt.value):
        assert (raised.code, raised.message) == (INTERNAL_ERROR, message)
        assert raised.data == {"status": 503, "code": "database_unavailable"}
        assert_hidden(json.dumps(raised.error.model_dump()), refused_port)
    for (name, _), result in zip(TOOL_CALLS, results, strict=True):
        assert result.is_error, name
        (content,) = result.content
        assert isinstance(content, TextContent)
        assert content.text == f"error: {message}", name
        assert result.structured_content == {"error": "database_unavailable"}, name
        assert_hidden(result.model_dump_json(), refused_port)
    assert_logged(caplog, "down-alice", refused_port)
    methods = [e.get("method") or e.get("tool") for e in failures(caplog)]
    assert methods == ["resources/read", "prompts/get", *(name for name, _ in TOOL_CALLS)]


@asynccontextmanager
async def http_client(url: str, headers: dict[str, str], mode: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


def bearer(settings: Settings, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(settings, user, 600)}"}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_over_http(
    down: Memstrata, refused_port: int, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """``legacy`` is the handshake era, where the SDK answered the driver's text with
    ``code: 0``; ``auto`` picks the stateless era, where it said "Internal server error"."""
    caplog.set_level(logging.INFO, logger="memstrata")
    settings = down.settings.model_copy(update={"web_ui": False})
    user = f"down-{mode}"
    with serve(create_app(settings, memstrata=down)) as url:
        rest = httpx.get(
            f"{url}/api/config/agent-files/memory", headers=bearer(settings, user), timeout=30
        )
        async with http_client(url, bearer(settings, user), mode) as client:
            with pytest.raises(MCPError) as read:
                await client.read_resource(MEMORY_URI)
            with pytest.raises(MCPError) as prompt:
                await client.get_prompt("memory_context", PROMPT_ARGS)
            tool = await client.call_tool("memory_read", {"name": "memory"})
    assert (rest.status_code, rest.json()["code"]) == (503, "database_unavailable")
    for raised in (read.value, prompt.value):
        assert (raised.code, raised.message) == (INTERNAL_ERROR, rest.json()["message"])
        assert_hidden(json.dumps(raised.error.model_dump()), refused_port)
    assert tool.is_error and tool.content == [
        TextContent(type="text", text=f"error: {rest.json()['message']}")
    ]
    assert_logged(caplog, user, refused_port)


async def test_a_runtime_starting_or_stopping(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Over HTTP the runtime is the app's, attached in its lifespan: before and after,
    REST answers 503 ``unavailable``, and so does every MCP handler (a tool used to fail
    as a JSON-RPC error, not an ``isError`` result)."""
    caplog.set_level(logging.INFO, logger="memstrata")
    context = ApiContext(settings)  # no runtime attached
    with pytest.raises(ApiError) as rest:
        _ = context.mem
    server = build_server(lambda: context.mem, lambda _ctx: "early-alice")
    async with Client(server) as client:
        with pytest.raises(MCPError) as read:
            await client.read_resource(MEMORY_URI)
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("memory_context", PROMPT_ARGS)
        tool = await client.call_tool("memory_read", {"name": "memory"})
    for raised in (read.value, prompt.value):
        assert (raised.code, raised.message) == (INTERNAL_ERROR, rest.value.detail)
        assert raised.data == {"status": 503, "code": "unavailable"}
    assert tool.is_error and tool.structured_content == {"error": "unavailable"}
    assert tool.content == [TextContent(type="text", text=f"error: {rest.value.detail}")]
    logged = [
        (e.get("method") or e.get("tool"), e["level"], e["user_id"], e["code"])
        for e in failures(caplog)
    ]
    assert logged == [
        (name, logging.WARNING, "early-alice", "unavailable")
        for name in ("resources/read", "prompts/get", "memory_read")
    ]


async def test_a_bug_tells_the_client_nothing_but_logs_its_traceback(
    mem: Memstrata, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception memstrata does not know is a 500 ``internal server error``, over the
    handshake era too (where the SDK sent its text with ``code: 0``); the traceback and
    the user go to the log."""
    caplog.set_level(logging.INFO, logger="memstrata")
    secret = "bug at /srv/memstrata/secret.py with token=abc"

    async def bug(*_args: object) -> None:
        raise RuntimeError(secret)

    monkeypatch.setattr(mem.sync, "read_file", bug)
    settings = mem.settings.model_copy(update={"web_ui": False})
    with serve(create_app(settings, memstrata=mem)) as url:
        async with http_client(url, bearer(settings, "bug-alice"), "legacy") as client:
            with pytest.raises(MCPError) as read:
                await client.read_resource(MEMORY_URI)
            with pytest.raises(MCPError) as prompt:
                await client.get_prompt("memory_context", PROMPT_ARGS)
            tool = await client.call_tool("memory_read", {"name": "memory"})
    for raised in (read.value, prompt.value):
        assert (raised.code, raised.message) == (INTERNAL_ERROR, "internal server error")
        assert raised.data == {"status": 500, "code": "internal_error"}
    assert tool.is_error and tool.structured_content == {"error": "internal_error"}
    assert tool.content == [TextContent(type="text", text="error: internal server error")]
    for answer in (read.value.error.model_dump_json(), tool.model_dump_json()):
        assert "secret" not in answer and "RuntimeError" not in answer, answer
    traced = [r for r in caplog.records if r.exc_info and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in traced] == [
        f"MCP {what} failed for user bug-alice"
        for what in ("resources/read", "prompts/get", "tool memory_read")
    ]
    assert all(r.exc_info and secret in str(r.exc_info[1]) for r in traced)
    assert all(e["cause"] == f"RuntimeError: {secret}" for e in failures(caplog))


def _answers(process: Any, ids: set[int], timeout_s: float) -> dict[int, dict[str, Any]]:
    """The stdio server's answers to the requests ``ids``, by id (they come in any order:
    the server handles requests concurrently)."""
    assert process.stdout is not None
    answers: dict[int, dict[str, Any]] = {}
    pending = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not ids <= answers.keys() and time.monotonic() < deadline:
            if not selector.select(timeout=0.5):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break  # the server exited
            *complete, pending = (pending + chunk).split(b"\n")
            for line in filter(bytes.strip, complete):
                answer = json.loads(line)
                answers[answer.get("id")] = answer
    return answers


def _send(process: Any, *messages: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
    process.stdin.flush()


@pytest.mark.timeout(120)
def test_over_stdio(tmp_path: Path, db: object, pg_url: str) -> None:
    """``memstrata mcp`` starts on a database reached through a proxy; the proxy is shut,
    and its port then refuses, as a stopped PostgreSQL's would."""
    url = make_url(pg_url)
    [upstream] = [p for p in Path(str(url.query["host"])).glob(".s.PGSQL.*") if p.suffix != ".lock"]
    with ShutProxy(str(upstream)) as proxy:
        proxied = url.difference_update_query(["host"]).set(host="127.0.0.1", port=proxy.port)
        process, log = start_mcp(
            tmp_path,
            "stdio-down",
            MEMSTRATA_DATABASE_URL=proxied.render_as_string(hide_password=False),
            MEMSTRATA_EMBEDDING_AUTOSTART="false",
            MEMSTRATA_LOG_LEVEL="INFO",
        )
        try:
            _send(process, INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert 1 in _answers(process, {1}, timeout_s=60), log.read_text(errors="replace")
            proxy.shut()
            read = {"uri": MEMORY_URI}
            prompt = {"name": "memory_context", "arguments": PROMPT_ARGS}
            tool = {"name": "memory_read", "arguments": {"name": "memory"}}
            _send(
                process,
                {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": read},
                {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": prompt},
                {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": tool},
            )
            answers = _answers(process, {2, 3, 4}, timeout_s=60)
        finally:
            process.kill()
            process.communicate()
    stderr = log.read_text(errors="replace")
    assert {2, 3, 4} <= answers.keys(), stderr
    message = rest_message()
    for request_id in (2, 3):
        assert answers[request_id]["error"] == {
            "code": INTERNAL_ERROR,
            "message": message,
            "data": {"status": 503, "code": "database_unavailable"},
        }, answers[request_id]
    result = answers[4]["result"]
    assert result["isError"] and result["content"][0]["text"] == f"error: {message}"
    for answer in answers.values():
        assert_hidden(json.dumps(answer), proxy.port)
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    logged = [line for line in lines if line.get("event") in ("mcp.tool", "mcp.request")]
    # in any order: the server handles the three requests concurrently
    assert sorted((e.get("method") or e.get("tool"), e["level"], e["user_id"]) for e in logged) == [
        ("memory_read", "warning", "stdio-down"),
        ("prompts/get", "warning", "stdio-down"),
        ("resources/read", "warning", "stdio-down"),
    ], stderr
    assert all("OperationalError" in e["cause"] for e in logged), logged
    assert not [line for line in lines if "exc" in line], stderr  # no traceback
