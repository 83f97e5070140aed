"""Search limits and vocabulary, one definition each (no numpy: the agent tools import it).

The HTTP API and the library accept up to ``MAX_TOP_K`` results; the agent tool
``memory_search`` allows fewer, ``MAX_TOOL_TOP_K``, because every hit it returns costs
the model context tokens. A query has one limit everywhere, ``MAX_QUERY_CHARS``.
"""

from __future__ import annotations

from typing import Literal, get_args

Source = Literal["memory", "conversation", "notes"]
SOURCES: tuple[str, ...] = get_args(Source)

DEFAULT_TOP_K = 10  # REST /api/memory/search, SearchService.search, the CLI
MAX_TOP_K = 100  # REST /api/memory/search, SearchService.search, the CLI
MAX_TOOL_TOP_K = 20  # the memory_search agent tool
# Every search's query, whoever sends it (REST, the library, the CLI, the memory_search
# tool in process and over MCP). The spec sets no limit: 4000 is the one HTTP clients
# already had, so none of them breaks.
MAX_QUERY_CHARS = 4000
