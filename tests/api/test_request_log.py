"""What the logs say of a request whose client hung up before the answer."""

from __future__ import annotations

import asyncio
import logging

import pytest
from mcp_types import ToolAnnotations
from starlette.types import Message, Receive, Scope, Send

from memstrata.api.metrics import ApiMetrics
from memstrata.api.middleware import CLIENT_CLOSED_REQUEST, RequestLogMiddleware
from memstrata.logs import event_fields
from memstrata.mcp.base import ToolOutput
from memstrata.mcp.failure_answers import run_tool
from memstrata.mcp.tools import McpTool

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], "state": {}}


async def _run(app: object) -> tuple[list[Message], list[dict[str, object]], ApiMetrics]:
    metrics = ApiMetrics()
    messages: list[Message] = [
        {"type": "http.request", "body": b"{}", "more_body": False},
        {"type": "http.disconnect"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("memstrata.api.access")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        middleware = RequestLogMiddleware(app, metrics)  # type: ignore[arg-type]
        with pytest.raises(asyncio.CancelledError):
            await middleware(dict(SCOPE), receive, send)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return sent, [event_fields(r) for r in records], metrics


def test_a_client_that_hung_up_first_is_499_not_a_server_error() -> None:
    """An MCP client whose 5-s timeout cut off a slow write was logged as a 500 WARNING,
    although the write had landed."""

    async def slow_tool(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # the body
        await receive()  # the client is gone
        raise asyncio.CancelledError  # the transport gives up on the request

    sent, logged, _ = asyncio.run(_run(slow_tool))
    assert sent == []
    assert [(e["event"], e["status"]) for e in logged] == [("http.request", CLIENT_CLOSED_REQUEST)]


def test_an_app_that_fails_before_answering_is_still_500() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        raise asyncio.CancelledError

    _, logged, _ = asyncio.run(_run(broken))
    assert [e["status"] for e in logged] == [500]


def test_a_tool_call_cut_off_by_the_client_is_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The write of a cut-off call may have landed; the log said nothing of the call."""
    started = asyncio.Event()

    async def slow(caller: object, arguments: dict[str, object]) -> ToolOutput:
        started.set()
        await asyncio.sleep(60)
        return ToolOutput("never")

    tool = McpTool("record_memory", "", {}, ToolAnnotations(), slow)

    async def scenario() -> None:
        call = asyncio.ensure_future(run_tool(tool, lambda: None, "alice", {}))  # type: ignore[arg-type, return-value]
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    caplog.set_level(logging.INFO, logger="memstrata.mcp.server")
    asyncio.run(scenario())
    logged = [event_fields(r) for r in caplog.records if r.getMessage() == "mcp.tool"]
    assert [(e["tool"], e["user_id"], e["cancelled"]) for e in logged] == [
        ("record_memory", "alice", True)
    ]
