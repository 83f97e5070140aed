"""How a failed MCP request or tool call is answered and logged.

A tool call runs here (:func:`run_tool`): a refusal (``ToolError``) is answered with its
own text, anything else with the REST API's message (:func:`memstrata.api.errors.map_exception`)
in an ``isError`` result; the request middleware :class:`FailureAnswers` gives resources
and prompts the same message as a JSON-RPC error. Each is logged with its user and cause
(``mcp.tool``, ``mcp.request``): at INFO when the caller's input or request was refused (a
``ToolError``, a 4xx, an agent tool's refusal), the caller's to fix, as the REST API logs
its 4xx; at WARNING when a part failed (the database, the sandbox, the embedding API: a
5xx, ``ToolAnswer.part_failed``). An exception the mapping does not know is a bug, logged
with its traceback and answered ``internal server error``. A call cancelled is logged
``cancelled=true``: at INFO when its HTTP client hung up (``client_gone``, REST's watch:
:mod:`memstrata.mcp.hangups`), as REST logs a client that left first (499); at WARNING for
any other cancel (the shutdown's cut, a client's cancel request, stdio's end), which may
have cut off work of the server's.

``mcp.tool`` says why a call failed by its code and kind only, never the answer's words:
refusals name the file's sections and quote its lines and the arguments' text, the user's
content (``agent.tool.refused``'s rule, :mod:`memstrata.agent.tool_log`). A part's failure
keeps its exception's text, as REST's ``http.error`` does: the driver's or the sandbox's
words, not the user's (the database pools hide statement parameters).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from anyio import get_cancelled_exc_class
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult, TextContent
from pydantic import ValidationError

from memstrata.api.error_shape import HttpError, error_body
from memstrata.api.errors import INTERNAL_ERROR as INTERNAL_ERROR_TEXT
from memstrata.api.errors import map_exception
from memstrata.logs import describe, log_event
from memstrata.mcp.base import Caller, RuntimeSource, ToolError, ToolOutput, UserSource
from memstrata.mcp.hangups import watching_client
from memstrata.mcp.inflight import server_stopping
from memstrata.mcp.tools import McpTool

# The server's events keep the logger they were documented under (docs/MCP.md).
logger = logging.getLogger("memstrata.mcp.server")


class FailureAnswers:
    """Server middleware: a request whose handler raised anything but a protocol error
    (``MCPError``, or the ``ValidationError`` the SDK answers for malformed params) is
    answered with the REST API's message as a JSON-RPC error (:func:`_failure_answer`) and
    logged as ``mcp.request`` with the user and the cause (module doc)."""

    def __init__(self, user: UserSource) -> None:
        self._user = user

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except Exception as exc:
            if ctx.request_id is None:  # a notification: nobody to answer
                raise
            user_id = self._user_id(ctx)
            answer = _failure_answer(exc, f"MCP {ctx.method}", user_id)
            log_event(
                logger,
                "mcp.request",
                _level(part_failed=answer.status_code >= 500),
                method=ctx.method,
                user_id=user_id,
                status=answer.status_code,
                code=answer.body["code"],
                cause=describe(exc),
            )
            raise _protocol_error(answer) from exc

    def _user_id(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        try:
            return self._user(ctx)
        except MCPError:  # over HTTP, a request without an authenticated user
            return None


def _failure_answer(exc: Exception, what: str, user_id: str | None) -> HttpError:
    """The REST API's answer to ``exc``; for an exception it does not know (a bug), its
    500 ``internal server error``, the traceback logged here, since nothing of it may
    reach the client."""
    mapped = map_exception(exc)
    if mapped is not None:
        return mapped
    logger.error("%s failed for user %s", what, user_id, exc_info=exc)
    return HttpError(500, error_body(500, INTERNAL_ERROR_TEXT))


def _protocol_error(answer: HttpError) -> MCPError:
    """``answer`` as a JSON-RPC error: the English message, which is what MCP clients
    show, and the REST status and code (and a 409's or 422's fields) as its data."""
    code = INVALID_PARAMS if answer.status_code < 500 else INTERNAL_ERROR
    body = answer.body
    data = {k: v for k, v in body.items() if k not in ("detail", "message")}
    return MCPError(code, str(body["message"]), {"status": answer.status_code, **data})


async def run_tool(
    tool: McpTool,
    runtime: RuntimeSource,
    user_id: str,
    arguments: dict[str, Any],
    request: object = None,
) -> CallToolResult:
    """Run one tool; every failure becomes an ``isError`` result (never a crashed session):
    a refusal with its own text, anything else with the REST API's message (module doc).
    ``request``: the HTTP request of the call (``Caller.request``)."""
    started = time.perf_counter()
    kind: str | None = None  # what failed: the refusal's or the exception's class
    cause: dict[str, Any] = {}
    # Watched as REST watches a request, to tell a cancel because the client hung up.
    async with watching_client(request) as gone:
        try:
            output = await tool.handler(Caller(runtime(), user_id, request, gone), arguments)
        except get_cancelled_exc_class():
            # A write may have landed all the same (a retried record_memory then finds its
            # entry and stores nothing). A client that hung up is no server fault: INFO, as
            # REST's 499 (module doc); any other cancel stays a WARNING.
            left = client_left(gone)
            log_event(
                logger,
                "mcp.tool",
                logging.INFO if left else logging.WARNING,
                tool=tool.name,
                user_id=user_id,
                cancelled=True,
                client_gone=left,
                ms=round((time.perf_counter() - started) * 1000, 2),
            )
            raise
        except ToolError as exc:
            output = ToolOutput(f"error: {exc.message}", exc.data, is_error=True)
            kind = type(exc.__cause__ or exc).__name__
        except Exception as exc:
            answer = _failure_answer(exc, f"MCP tool {tool.name}", user_id)
            code = str(answer.body["code"])
            output = ToolOutput(
                f"error: {answer.body['message']}",
                {"error": code},
                is_error=True,
                part_failed=answer.status_code >= 500,
            )
            kind = type(exc).__name__
            if output.part_failed:  # a part's words, not the user's (module doc)
                cause = {"cause": describe(exc)}
    log_event(
        logger,
        "mcp.tool",
        _level(part_failed=output.part_failed),
        tool=tool.name,
        user_id=user_id,
        error=output.is_error,
        ms=round((time.perf_counter() - started) * 1000, 2),
        answer_chars=len(output.text),
        **(failure_fields(output, kind) if output.is_error else {}),
        **cause,
    )
    return CallToolResult(
        content=[TextContent(type="text", text=output.text)],
        structured_content=output.data,
        is_error=output.is_error,
    )


def client_left(gone: threading.Event) -> bool:
    """Was a cancelled call's the client's doing: its HTTP client hung up (``gone``), the
    server not stopping? A session's call cut off by the shutdown is cancelled after its
    stream was ended with the shutdown's refusal, which the watch reads as a hang-up too;
    and a cut-off call's cancel can land after uvicorn has put its SIGTERM handler back, so
    ``server_stopping`` alone (the call's connection still open) cannot tell either."""
    return gone.is_set() and not server_stopping()


def _level(*, part_failed: bool) -> int:
    """``mcp.tool``'s and ``mcp.request``'s level: INFO for a success and for a refusal (a
    ``ToolError``: the caller's arguments, a stale version, an unknown skill; a 4xx; an
    agent tool's refusal — the caller's to fix, and no operator's concern), WARNING when a
    part failed (module doc)."""
    return logging.WARNING if part_failed else logging.INFO


def failure_fields(output: ToolOutput, kind: str | None) -> dict[str, Any]:
    """A failed call's ``code`` (the ``error`` of its structured result, else the answer's
    own: an agent tool's cause) and ``kind`` (the class of what refused it, when an
    exception did), none of its text (module doc)."""
    code = (output.data or {}).get("error") or output.code
    return {
        **({"code": str(code)} if code else {}),
        **({"kind": kind} if kind else {}),
    }
