"""What a tool handler gets and gives back, and what the catalogue says of each tool."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server import ServerRequestContext
from mcp_types import Tool, ToolAnnotations

from memstrata.runtime import Memstrata

# Where a request's services and user come from: the transport binds them (stdio: the
# ``--user``; HTTP: the bearer token's user, the runtime its lifespan attached).
RuntimeSource = Callable[[], Memstrata]
UserSource = Callable[[ServerRequestContext[Any, Any]], str]


@dataclass(frozen=True)
class Caller:
    """One call: the runtime's services and the user every read and write is scoped to;
    ``request``: the HTTP request that brought it (None over stdio); ``gone``: set once its
    HTTP client hung up (``failure_answers.run_tool`` watches every call, once; never set
    over stdio), for a tool to end work nobody will read."""

    mem: Memstrata
    user_id: str
    request: object = None
    gone: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer: text for the model, the same data structured for the client."""

    text: str
    data: dict[str, Any] | None = None
    is_error: bool = False
    # A failed answer's: a part (database, sandbox, embedding) failed, not the caller's
    # input (``ToolAnswer.part_failed``); its log line is a WARNING, a refusal's INFO.
    part_failed: bool = False
    # A failed answer's code for the log line where ``data`` has no ``error`` (an agent
    # write tool's ``ToolAnswer.cause``): the line says why by code, never by its text.
    code: str | None = None


class ToolError(Exception):
    """A refused call (bad input, stale version, unknown skill): an ``isError`` result,
    never a protocol error, and nothing was written."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


Handler = Callable[[Caller, dict[str, Any]], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: ToolAnnotations
    handler: Handler
    # The shape of the structured result, for clients that validate it (the SDK's does);
    # None for the agent write tools, which answer in text only.
    output_schema: dict[str, Any] | None = None

    def describe(self) -> Tool:
        return Tool(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=self.annotations,
        )


def hints(*, read_only: bool, destructive: bool = False, idempotent: bool) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=None if read_only else destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,  # only this user's memory, never the outside world
    )
