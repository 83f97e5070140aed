"""What a tool handler gets and gives back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstrata.runtime import Memstrata


@dataclass(frozen=True)
class Caller:
    """One call: the runtime's services and the user every read and write is scoped to."""

    mem: Memstrata
    user_id: str


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer: text for the model, the same data structured for the client."""

    text: str
    data: dict[str, Any] | None = None
    is_error: bool = False


class ToolError(Exception):
    """A refused call (bad input, stale version, unknown skill): an ``isError`` result,
    never a protocol error, and nothing was written."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
