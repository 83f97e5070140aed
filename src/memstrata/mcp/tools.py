"""The MCP tools: schema, annotations and a thin handler each, over the existing services.

=========================  =============================================================
tool                       calls (the same as)
=========================  =============================================================
memory_search              ``SearchService.search`` with the agent tool's schema and limits
                           (``memstrata.agent``); result = REST ``POST /api/memory/search``,
                           text = the agent tool's hit lines (``search_text``)
memory_read                REST ``GET /api/config/agent-files/{name}`` (+ AGENTS template)
memory_write               REST ``PUT /api/config/agent-files/{name}`` (:func:`write_file`)
record_memory,             ``memstrata.agent.tools.MemoryTools``: schemas, checks, text
update_long_term_memory,
update_user
conversation_index_turn    REST ``POST /api/memory/conversations/{session_id}/turns``
skills_list, skill_set     ``SkillService`` (REST ``/api/config/skills``)
=========================  =============================================================

Each group lives in a module of its own: :mod:`~memstrata.mcp.agent_tools` (memory_search
and the agent's write tools), :mod:`~memstrata.mcp.file_tools`,
:mod:`~memstrata.mcp.turn_tools`, :mod:`~memstrata.mcp.skill_tools`; arguments are parsed
with the REST API's messages by :mod:`~memstrata.mcp.tool_args`. Bad arguments, stale
versions and unknown skills are ``ToolError`` (an ``isError`` result); nothing is written
on any error.
"""

from __future__ import annotations

from memstrata.mcp.agent_tools import SEARCH_TOOL, WRITE_TOOLS
from memstrata.mcp.base import McpTool
from memstrata.mcp.file_tools import FILE_TOOLS
from memstrata.mcp.skill_tools import SKILL_TOOLS
from memstrata.mcp.turn_tools import TURN_TOOL

__all__ = ["TOOLS", "McpTool"]

# The order tools/list answers with.
TOOLS: tuple[McpTool, ...] = (SEARCH_TOOL, *FILE_TOOLS, *WRITE_TOOLS, TURN_TOOL, *SKILL_TOOLS)
