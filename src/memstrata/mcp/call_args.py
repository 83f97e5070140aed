"""Refusals for ``tools/call``, ``resources/read`` and ``initialize`` whose params have the
wrong shape.

The SDK validates these params before any handler runs, and answers ``arguments`` that
are not an object, or a ``name`` / ``uri`` that is not a string, with ``-32602 "Invalid
request parameters"`` and no detail (``data: ""``): a model cannot tell what to send
instead. :class:`CallShapeCheck` is a server middleware that sees the raw params first and
refuses them with ``-32602`` and a message saying what is expected, logged as
``mcp.tool`` (or ``mcp.resource``, ``mcp.initialize``) with the user, like every other
refused call. An ``initialize`` is checked by the SDK's own rule for its protocol version
(so the two cannot disagree on what passes), its mistakes said as a tool's are
(:func:`memstrata.mcp.tool_args.refusals`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, InitializeRequestParams
from mcp_types import methods as sdk_methods
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from memstrata.api.input_errors import Taker
from memstrata.logs import log_event
from memstrata.mcp.base import UserSource
from memstrata.mcp.prompt_args import shown
from memstrata.mcp.refusal_log import INPUT_REFUSED_LEVEL
from memstrata.mcp.tool_args import refusals

logger = logging.getLogger(__name__)
_EVENTS = {"tools/call": "mcp.tool", "initialize": "mcp.initialize"}


def call_shape_error(
    method: str, params: Mapping[str, Any] | None, version: str | None = None
) -> str | None:
    """What is wrong with the shape of a ``tools/call``, ``resources/read`` or (at protocol
    ``version``) ``initialize`` (None: nothing this check knows of; the SDK and the
    handlers check the rest)."""
    if method == "initialize":
        return initialize_error(params, version)
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


_INITIALIZE = Taker("initialize", "param(s)", InitializeRequestParams, whole="params")
_INITIALIZE_NEEDS = (
    f'initialize needs params protocolVersion (e.g. "{LATEST_HANDSHAKE_VERSION}"), '
    'capabilities ({} for none) and clientInfo ({"name": "…", "version": "…"})'
)


def initialize_error(params: Mapping[str, Any] | None, version: str | None) -> str | None:
    """What is wrong with an ``initialize``'s params by the SDK's own check at ``version``
    (the SDK said only "Invalid request parameters"); None when they pass, or when there
    is no ``initialize`` at that version (the SDK answers that itself)."""
    if version is None or ("initialize", version) not in sdk_methods.CLIENT_REQUESTS:
        return None
    try:
        sdk_methods.validate_client_request("initialize", version, params)
    except ValidationError as exc:
        # The SDK validates the whole request: its params' errors are under "params".
        errors = [{**e, "loc": e["loc"][1:]} for e in exc.errors() if e["loc"][:1] == ("params",)]
        return "; ".join([_INITIALIZE_NEEDS, *refusals(errors, _INITIALIZE)])
    return None


class CallShapeCheck:
    """Server middleware: :func:`call_shape_error` before the SDK's validation."""

    def __init__(self, user: UserSource) -> None:
        self._user = user

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        problem = (
            None
            if ctx.request_id is None
            else call_shape_error(ctx.method, ctx.params, ctx.protocol_version)
        )
        if problem is None:
            return await call_next(ctx)
        log_event(
            logger,
            _EVENTS.get(ctx.method, "mcp.resource"),
            INPUT_REFUSED_LEVEL,
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
