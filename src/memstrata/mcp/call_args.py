"""Refusals for ``tools/call`` and ``resources/read`` whose params have the wrong shape.

The SDK validates these params before any handler runs, and answers ``arguments`` that
are not an object, or a ``name`` / ``uri`` that is not a string, with ``-32602 "Invalid
request parameters"`` and no detail (``data: ""``): a model cannot tell what to send
instead. :class:`CallShapeCheck` is a server middleware that sees the raw params first and
refuses them with ``-32602`` and a message saying what is expected, logged as
``mcp.tool`` (or ``mcp.resource``) with the user, like every other refused call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from memstrata.logs import log_event
from memstrata.mcp.prompt_args import shown

logger = logging.getLogger(__name__)

UserSource = Callable[[ServerRequestContext[Any, Any]], str]


def call_shape_error(method: str, params: Mapping[str, Any] | None) -> str | None:
    """What is wrong with the shape of a ``tools/call`` or ``resources/read`` (None: nothing
    this check knows of; the SDK and the handlers check the rest)."""
    params = params or {}
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            return f"name must be a JSON string, the tool's name; got {shown(name)}"
        if arguments is not None and not isinstance(arguments, Mapping):
            return (
                f"arguments must be a JSON object of the tool's arguments, e.g. "
                f'{{"query": "tea"}}; got {shown(arguments)}'
            )
    if method == "resources/read" and not isinstance(params.get("uri"), str):
        return (
            'uri must be a JSON string, e.g. "memstrata://files/user"; '
            f"got {shown(params.get('uri'))}"
        )
    return None


class CallShapeCheck:
    """Server middleware: :func:`call_shape_error` before the SDK's validation."""

    def __init__(self, user: UserSource) -> None:
        self._user = user

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        problem = None if ctx.request_id is None else call_shape_error(ctx.method, ctx.params)
        if problem is None:
            return await call_next(ctx)
        log_event(
            logger,
            "mcp.tool" if ctx.method == "tools/call" else "mcp.resource",
            logging.WARNING,
            method=ctx.method,
            user_id=self._user_id(ctx),
            error=problem,
        )
        raise MCPError(INVALID_PARAMS, problem)

    def _user_id(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        try:
            return self._user(ctx)
        except MCPError:
            return None
