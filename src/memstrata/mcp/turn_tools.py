"""``conversation_index_turn``: REST ``POST /api/memory/conversations/{session_id}/turns``
with the session id as an argument (its body, :class:`TurnRequest`, and its rules).

Over HTTP a client that hangs up ends the turn's embedding as on the REST route
(``Caller.gone``, set by :func:`memstrata.mcp.hangups.watching_client`): stored, without a
vector if its request was not sent yet.

The session-id rule is REST's; a refusal gives the library's reason and its one-line rule
(``retrieval.session_ids.SESSION_ID_HINT``), which has no URL advice, as it is.

What a model reads is not REST's: the listing describes each argument in a line of what
calling it right needs (REST's descriptions named its path, and the session-id rule every
Unicode range it refuses: a third of the tool list's tokens), and the answer is a sentence
saying what happened to the turn (:func:`turn_answer`), a replaced one above all. The REST
body is the ``structuredContent``, unchanged.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import anyio.to_thread
from pydantic import Field, StrictStr

from memstrata.api.memory_schemas import IndexReportBody, TurnRequest
from memstrata.errors import InvalidContentError
from memstrata.mcp.base import Caller, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.tool_args import args_schema, parse_arguments, result_schema
from memstrata.retrieval.embedding_provider import deadline_ends_when
from memstrata.retrieval.session_ids import MAX_SESSION_ID_LENGTH
from memstrata.retrieval.staging import IndexReport
from memstrata.retrieval.turn_limit import TURN_LIMIT_RULE


class _TurnArgs(TurnRequest):
    # The rule is checked by the indexer (``retrieval.session_ids.check_session_id``, as for
    # REST), whose refusal quotes it whole; the schema states its bounds.
    session_id: StrictStr = Field(
        json_schema_extra={"minLength": 1, "maxLength": MAX_SESSION_ID_LENGTH},
    )


# Each argument as the listing describes it to a model (module doc).
_DESCRIPTIONS = {
    "session_id": "The conversation's id, e.g. 'chat-2026-12-06': 1-200 characters, "
    "without '/' or '\\'.",
    "turn_index": "The round's position in the conversation: 0, 1, 2, … The same index again "
    "replaces that round.",
    "user_message": "What the user said.",
    "assistant_reply": "What the assistant answered.",
    "timestamp": "When the round happened, ISO 8601 (2026-12-05T10:00:00Z; no offset: UTC); "
    "default now.",
}


def _listed_schema() -> dict[str, Any]:
    """The arguments' schema, each described for a model, in the order a call reads
    (the session first), without the field titles the schema generator adds ("Turn
    Index"), which tell it nothing more."""
    schema = args_schema(_TurnArgs)
    properties = schema["properties"]
    schema["properties"] = {name: properties[name] for name in _DESCRIPTIONS}
    for name, spec in schema["properties"].items():
        spec.pop("title", None)
        spec["description"] = _DESCRIPTIONS[name]
    schema["required"] = [name for name in _DESCRIPTIONS if name in schema["required"]]
    return schema


async def conversation_index_turn(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = parse_arguments(_TurnArgs, arguments, "conversation_index_turn")
    index = partial(
        caller.mem.indexer.index_turn,
        caller.user_id,
        args.session_id,
        args.turn_index,
        args.user_message,
        args.assistant_reply,
        timestamp=args.timestamp,
    )

    def run(gone: threading.Event) -> IndexReport:
        with deadline_ends_when(gone):
            return index()

    try:
        report = await anyio.to_thread.run_sync(run, caller.gone)
    except (InvalidContentError, ValueError) as exc:
        # The round's refusal (``RoundsInvalidError``) quotes the session-id rule's.
        raise ToolError(str(exc)) from exc
    return ToolOutput(turn_answer(args.session_id, args.turn_index, report), report.to_dict())


def turn_answer(session_id: str, turn_index: int, report: IndexReport) -> str:
    """What indexing did to the turn, in a sentence, then a ``note:`` line per warning (an
    embedding that failed). A replaced turn is said to be one: its earlier text is gone
    from search, and a model that meant a new round reused the index."""
    turn = f"turn {turn_index} of session {session_id!r}"
    existed = bool(report.deleted or report.unchanged)
    if not report.changed:
        said = f"Turn {turn_index} of session {session_id!r} was indexed with this text "
        said += "already; nothing changed."
    elif existed:
        said = (
            f"Indexed {turn}: it replaced the earlier {turn}, whose text memory_search no "
            "longer finds. To keep both, index a new round with the next turn_index."
        )
    else:
        said = f"Indexed {turn}."
    return "\n".join([said, *(f"note: {warning}" for warning in report.warnings)])


TURN_TOOL = McpTool(
    "conversation_index_turn",
    "Index one conversation round (user message + assistant reply) so memory_search "
    "finds it. Re-sending the same turn_index with the same text changes nothing; "
    f"with new text it replaces that turn. {TURN_LIMIT_RULE}.",
    _listed_schema(),
    hints(read_only=False, destructive=True, idempotent=True),
    conversation_index_turn,
    result_schema(IndexReportBody),
)
