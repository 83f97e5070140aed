"""The agent tools over MCP: ``memory_search`` (with a structured result) and the three
write tools, with the agent tools' own schemas, checks and messages
(:mod:`memstrata.agent`).

Over HTTP a search whose client hangs up ends as on the REST route (``Caller.gone``, set
by :func:`memstrata.mcp.hangups.watching_client`): its query is not sent if it still waits
for the query lane, an embedding in flight is abandoned, and ``search.client_gone`` is
logged. Before, a hung-up search waited for a slot and embedded its query for nobody."""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from memstrata.agent.answers import search_text
from memstrata.agent.arguments import search_arguments
from memstrata.agent.schemas import check_arguments, tool_schemas
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.api.memory_schemas import SearchResults
from memstrata.errors import ToolInputError
from memstrata.mcp.base import Caller, Handler, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.files import read_file
from memstrata.mcp.tool_args import integer_arguments, result_schema
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.hangup import ClientGoneError, searched_for
from memstrata.sandbox.results import open_sandbox

if TYPE_CHECKING:
    from memstrata.retrieval.ranking import SearchResponse

# The agent tools that MCP exposes as they are (memory_search gets a structured result).
AGENT_WRITE_TOOLS = ("record_memory", "update_long_term_memory", "update_user")


def _agent_function(name: str) -> dict[str, Any]:
    return next(
        s["function"] for s in tool_schemas(include_search=True) if s["function"]["name"] == name
    )


async def memory_search(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    arguments = integer_arguments(arguments, _SEARCH["parameters"])
    try:
        query, top_k, sources = search_arguments(**check_arguments("memory_search", arguments))
    except ToolInputError as exc:
        raise ToolError(str(exc)) from exc
    search = partial(caller.mem.search.search, caller.user_id, query, top_k=top_k, sources=sources)

    def run(gone: threading.Event) -> SearchResponse:
        with searched_for(gone):
            return search()

    try:
        result = await anyio.to_thread.run_sync(run, caller.gone)
    except ClientGoneError as exc:
        # Nobody reads this answer; the search has logged search.client_gone.
        raise ToolError(str(exc)) from exc
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
    # The model reads the agent tool's compact lines (indented JSON cost up to twice the
    # hits' own text in tokens); a client that wants the fields reads structuredContent.
    text = search_text(result.hits, query, result.warnings)
    return ToolOutput(text, result.to_dict())


def _agent_tool(name: str) -> Handler:
    async def run(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
        mem, user_id = caller.mem, caller.user_id
        # A brand-new user starts from the templates, as an agent session would.
        await read_file(caller, FileKind.MEMORY)
        sandbox = open_sandbox(mem.sandboxes, user_id, None)  # a failing provider: DB only
        context = ToolContext.bind(user_id, mem.sync, sandbox, rounds=False)  # no round ends
        # A failed call is logged once, as mcp.tool (failure_answers.run_tool).
        tools = MemoryTools(context, searcher=mem.search, log_refusals=False)
        answer = await tools.call(name, arguments)
        if not answer.failed:
            # Platform agents cached for this user were built on the old files.
            await mem.sync.invalidate(user_id)
        return ToolOutput(
            str(answer),
            is_error=answer.failed,
            part_failed=answer.part_failed,
            code=answer.cause if answer.failed else None,
        )

    return run


_SEARCH = _agent_function("memory_search")
SEARCH_TOOL = McpTool(
    "memory_search",
    _SEARCH["description"]
    + " Answers one line per hit: its file or conversation, date and score, and the lines "
    "that match (a note: line when the search was degraded). structuredContent has each "
    "hit's whole text, source ids and per-stage ranks (explain).",
    _SEARCH["parameters"],
    hints(read_only=True, idempotent=True),
    memory_search,
    result_schema(SearchResults),
)

# All three may remove text (record_memory the entry its 'replaces' names), and none
# changes more when repeated (record_memory stores no entry twice).
_AGENT_HINTS = {
    "record_memory": hints(read_only=False, destructive=True, idempotent=True),
    "update_long_term_memory": hints(read_only=False, destructive=True, idempotent=True),
    "update_user": hints(read_only=False, destructive=True, idempotent=True),
}


def _write_tool(name: str) -> McpTool:
    function = _agent_function(name)
    return McpTool(
        name, function["description"], function["parameters"], _AGENT_HINTS[name], _agent_tool(name)
    )


WRITE_TOOLS = tuple(_write_tool(name) for name in AGENT_WRITE_TOOLS)
