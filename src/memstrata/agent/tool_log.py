"""The log line of a failed memory tool call: ``agent.tool.refused``, once per call.

A refused or failed call answers the model with ``error: …`` and stores nothing; without
this line a platform had no trail of it (malformed arguments, an oversized ``update_user``,
a whole-file write refused). INFO when the caller's input was refused (the caller's to
fix), WARNING when a part failed (database, sandbox, embedding): ``ToolAnswer.part_failed``.
The line says which tool and why by its code (``error``: ``ToolAnswer.cause``) only, none
of the answer's words: refusals name the file's sections, keys and lines and quote the
arguments' text — the user's content, even in their opening words ("USER.md has no ##
<section>, and <key> is set under ## <heading>") — which stays out of the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from memstrata.agent.answers import ToolAnswer
from memstrata.logs import log_event
from memstrata.text import shortened

logger = logging.getLogger(__name__)

REFUSED_EVENT = "agent.tool.refused"
# A tool name as a caller sent it (any text, for an unknown tool) is cut here.
TOOL_NAME_CHARS = 80

P = ParamSpec("P")


class Logs(Protocol):
    """What a logged tool method is bound to: it logs the call's failed answer."""

    def log_failed(self, tool: str, answer: ToolAnswer) -> None: ...


S = TypeVar("S", bound=Logs)
Tool = Callable[Concatenate[S, P], Awaitable[ToolAnswer]]


def logged(tool: Tool[S, P]) -> Tool[S, P]:
    """A tool method whose failed answer is logged once, under the method's name: a
    framework may call the methods directly, not only through a dispatcher."""

    @wraps(tool)
    async def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> ToolAnswer:
        answer = await tool(self, *args, **kwargs)
        self.log_failed(tool.__name__, answer)
        return answer

    return run


def log_refusal(user_id: str, tool: str, answer: ToolAnswer) -> None:
    """Log failed call ``answer`` of ``tool`` (nothing for an answer that did not fail)."""
    if not answer.failed:
        return
    log_event(
        logger,
        REFUSED_EVENT,
        logging.WARNING if answer.part_failed else logging.INFO,
        user_id=user_id,
        tool=shortened(tool, TOOL_NAME_CHARS),
        error=answer.cause,
    )
