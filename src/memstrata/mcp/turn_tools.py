"""``conversation_index_turn``: REST ``POST /api/memory/conversations/{session_id}/turns``
with the session id as an argument (its body, :class:`TurnRequest`, and its rules)."""

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


class _TurnArgs(TurnRequest):
    # The rule is checked by the indexer (``retrieval.session_ids.check_session_id``, as for
    # REST); the schema only documents it.
    session_id: StrictStr = Field(
        description="The conversation's id (as in POST /api/memory/conversations/{id}/turns): "
        + SESSION_ID_RULE,
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
        raise ToolError(str(exc)) from exc
    data = report.to_dict()
    return ToolOutput(json_text(data), data)


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
