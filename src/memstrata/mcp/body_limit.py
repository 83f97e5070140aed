"""How large one MCP message may be: ``/mcp``'s request body and a line on stdio alike.

A call of a tool whose ``content`` may be a whole memory file takes the REST PUT's body
limit, :func:`memstrata.config.file_request_bytes`: a file at MEMSTRATA_MAX_CONTENT_BYTES
fits however its JSON escapes it (a file of control characters is six times its size as
JSON), and the tool measures the decoded content against the file limit, refusing it in
the file limit's words. Every other message keeps MEMSTRATA_MAX_REQUEST_BYTES. Which tool
a message calls is known only once it is read, so both transports read up to the larger
limit and parse a message over the smaller one to see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from memstrata.config import Settings, file_request_bytes
from memstrata.retrieval.turn_limit import TURN_LIMIT_RULE

# memory_write replaces the file; update_long_term_memory (whole_file, or a section) and
# update_user (a section) take a body that may be nearly all of it.
WHOLE_FILE_TOOLS = frozenset({"memory_write", "update_long_term_memory", "update_user"})

# What a client over the body limit should do (REST's 413 names its batch endpoint): one
# tool call per request, and a turn's text within the turn limit, split over turns.
MCP_BODY_FIX = (
    f"send a smaller request, one tool call each; in conversation_index_turn {TURN_LIMIT_RULE}"
)


def carries_file(message: bytes) -> bool:
    """Whether ``message`` is a ``tools/call`` of one of :data:`WHOLE_FILE_TOOLS`."""
    try:
        document = json.loads(message)
    except (ValueError, RecursionError):
        return False
    if not isinstance(document, dict) or document.get("method") != "tools/call":
        return False
    params = document.get("params")
    return isinstance(params, dict) and params.get("name") in WHOLE_FILE_TOOLS


@dataclass(frozen=True)
class MessageLimits:
    """``request``: any message's limit; ``file``: a whole-file call's (never smaller)."""

    request: int
    file: int

    @classmethod
    def of(cls, settings: Settings) -> MessageLimits:
        return cls(settings.max_request_bytes, file_request_bytes(settings))

    def over(self, message: bytes) -> int | None:
        """The limit ``message`` is over, or None. Past :attr:`file` that is the one named
        whatever the message calls: a transport reads no further, so cannot tell."""
        if len(message) > self.file:
            return self.file
        if len(message) <= self.request or carries_file(message):
            return None
        return self.request
