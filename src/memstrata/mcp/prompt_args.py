"""Refusals for ``prompts/get`` whose arguments do not fit the prompt, naming the argument.

The SDK validates a ``prompts/get`` (``arguments`` is a map of strings) before any handler
runs, and answers a value that is not a string, or arguments that are not an object, with
``-32602 "Invalid request parameters"`` and nothing more; an argument the prompt does not
declare it passes on, to be ignored. :class:`PromptArgumentCheck` is a server middleware,
so it sees the raw params first: it refuses each of these with ``-32602`` and the agent
tools' wording (``unknown argument(s) x; memory_context takes token_limit``,
``token_limit must be a JSON string, …``, ``token_limit must be a whole number in ASCII
digits …``), over stdio and HTTP alike, and logs every refused ``prompts/get`` as
``mcp.prompt`` with the user, as ``mcp.tool`` logs a refused tool call.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, Prompt
from pydantic import ValidationError

from memstrata.agent.json_numbers import shown as shown  # call_args' too
from memstrata.logs import log_event
from memstrata.mcp.base import UserSource
from memstrata.mcp.refusal_log import INPUT_REFUSED_LEVEL

logger = logging.getLogger(__name__)

# Prompt arguments that carry a whole number (as strings: MCP's prompt arguments are). Only
# ASCII digits: Python's int() also reads "32_000", " +32000" and full-width or Arabic-Indic
# digits, which the refusal's "whole number" wording and the listing's example do not
# promise, and another server would refuse.
WHOLE_NUMBER_ARGUMENTS = frozenset({"token_limit"})
_DIGITS = re.compile(r"[0-9]+")


def unknown_prompt(name: str, available: Sequence[str]) -> MCPError:
    return MCPError(
        INVALID_PARAMS, f"unknown prompt {name[:100]!r}; available: {', '.join(available)}"
    )


class PromptArgumentCheck:
    """Server middleware: ``prompts/get`` checked against ``prompts`` (their declared
    arguments) before the SDK's validation; ``examples`` holds a value to show for each
    argument, as the client should send it (a string)."""

    def __init__(
        self, prompts: Sequence[Prompt], examples: Mapping[str, str], user: UserSource
    ) -> None:
        self._prompts = {prompt.name: prompt for prompt in prompts}
        self._examples = examples
        self._user = user

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "prompts/get" or ctx.request_id is None:
            return await call_next(ctx)
        try:
            self._check(ctx.params)
            return await call_next(ctx)
        except (MCPError, ValidationError) as exc:
            name = (ctx.params or {}).get("name")
            log_event(
                logger,
                "mcp.prompt",
                INPUT_REFUSED_LEVEL,
                prompt=name[:100] if isinstance(name, str) else None,
                user_id=self._user_id(ctx),
                # the SDK answers a ValidationError with this and no detail
                error=exc.error.message
                if isinstance(exc, MCPError)
                else "Invalid request parameters",
            )
            raise

    def _check(self, params: Mapping[str, Any] | None) -> None:
        available = list(self._prompts)
        name = (params or {}).get("name")
        if not isinstance(name, str):
            raise MCPError(
                INVALID_PARAMS,
                f"name must be a JSON string, the prompt's name; got {shown(name)}; "
                f"available: {', '.join(available)}",
            )
        prompt = self._prompts.get(name)
        if prompt is None:
            raise unknown_prompt(name, available)
        arguments = (params or {}).get("arguments")
        if arguments is None:
            return  # the prompt says which arguments it needs
        declared = [argument.name for argument in prompt.arguments or []]
        if not isinstance(arguments, Mapping):
            example = json.dumps({key: self._examples.get(key, "…") for key in declared})
            raise MCPError(
                INVALID_PARAMS,
                f"arguments must be a JSON object of strings, e.g. {example}; "
                f"got {shown(arguments)}",
            )
        unknown = sorted(str(key) for key in arguments if key not in declared)
        if unknown:
            raise MCPError(
                INVALID_PARAMS,
                f"unknown argument(s) {', '.join(k[:100] for k in unknown)}; "
                f"{name} takes {', '.join(declared)}",
            )
        for key, value in arguments.items():
            if not isinstance(value, str):
                example = json.dumps(self._examples.get(key, "…"))
                raise MCPError(
                    INVALID_PARAMS,
                    f"{key} must be a JSON string, e.g. {example} (prompt arguments are "
                    f"strings in MCP); got {shown(value)}",
                )
            if key in WHOLE_NUMBER_ARGUMENTS and _DIGITS.fullmatch(value) is None:
                example = json.dumps(self._examples.get(key, "1"))
                raise MCPError(
                    INVALID_PARAMS,
                    f"{key} must be a whole number in ASCII digits (0-9), e.g. {example}; "
                    f"got {value[:40]!r}",
                )

    def _user_id(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        try:
            return self._user(ctx)
        except MCPError:
            return None
