"""``conversation_index_turn``: REST ``POST /api/memory/conversations/{session_id}/turns``
with the session id as an argument (its body, :class:`TurnRequest`, and its rules).

The session-id rule is REST's, but its advice on URLs is not MCP's: here the id is a JSON
string, never in a URL, so nothing is percent-encoded. The rule and a refusal say so
without that advice (:data:`MCP_SESSION_ID_RULE`, :func:`mcp_session_id_message`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio.to_thread
from pydantic import Field, StrictStr

from memstrata.api.schemas import IndexReportBody, TurnRequest
from memstrata.errors import InvalidContentError
from memstrata.mcp.base import Caller, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.tool_args import args_schema, json_text, parse_arguments, result_schema
from memstrata.retrieval.session_ids import MAX_SESSION_ID_LENGTH, SESSION_ID_RULE

# The rule up to its URL advice ("…, which a URL decoder leaves for bytes that are not
# UTF-8: percent-encode session ids …"), which is REST's.
_URL_ADVICE = ", which a URL decoder"
MCP_SESSION_ID_RULE = SESSION_ID_RULE.partition(_URL_ADVICE)[0] + ", the replacement character)"
# What the library says of a U+FFFD in an id, and what MCP says instead.
_URL_FIX = "what a URL decoder makes of bytes that are not UTF-8; percent-encode the id as UTF-8"
_MCP_FIX = "it stands where text was not valid UTF-8; send the id's own characters, or remove it"


class _TurnArgs(TurnRequest):
    # The rule is checked by the indexer (``retrieval.session_ids.check_session_id``, as for
    # REST); the schema only documents it.
    session_id: StrictStr = Field(
        description="The conversation's id (as in POST /api/memory/conversations/{id}/turns): "
        + MCP_SESSION_ID_RULE,
        json_schema_extra={"minLength": 1, "maxLength": MAX_SESSION_ID_LENGTH},
    )


async def conversation_index_turn(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = parse_arguments(_TurnArgs, arguments)
    index = partial(
        caller.mem.indexer.index_turn,
        caller.user_id,
        args.session_id,
        args.turn_index,
        args.user_message,
        args.assistant_reply,
        timestamp=args.timestamp,
    )
    try:
        report = await anyio.to_thread.run_sync(index)
    except (InvalidContentError, ValueError) as exc:
        # The round's refusal (``RoundsInvalidError``) quotes the session-id rule's.
        raise ToolError(mcp_session_id_message(str(exc))) from exc
    data = report.to_dict()
    return ToolOutput(json_text(data), data)


def mcp_session_id_message(message: str) -> str:
    """A refusal quoting the library's session-id rule, with MCP's advice for its URL
    advice; any other message as it is."""
    return message.replace(SESSION_ID_RULE, MCP_SESSION_ID_RULE).replace(_URL_FIX, _MCP_FIX)


TURN_TOOL = McpTool(
    "conversation_index_turn",
    "Index one conversation round (user message + assistant reply) so memory_search "
    "finds it. Re-sending the same turn_index with the same text changes nothing; "
    "with new text it replaces that turn.",
    args_schema(_TurnArgs),
    hints(read_only=False, destructive=True, idempotent=True),
    conversation_index_turn,
    result_schema(IndexReportBody),
)
