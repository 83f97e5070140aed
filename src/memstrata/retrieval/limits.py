"""Search limits and vocabulary, one definition each (no numpy: the agent tools import it).

The HTTP API and the library accept up to ``MAX_TOP_K`` results; the agent tool
``memory_search`` allows fewer, ``MAX_TOOL_TOP_K``, because every hit it returns costs
the model context tokens.
"""

from __future__ import annotations

from typing import Literal, get_args

Source = Literal["memory", "conversation", "notes"]
SOURCES: tuple[str, ...] = get_args(Source)

DEFAULT_TOP_K = 10  # REST /api/memory/search, SearchService.search, the CLI
MAX_TOP_K = 100  # REST /api/memory/search, SearchService.search, the CLI
MAX_TOOL_TOP_K = 20  # the memory_search agent tool
MAX_QUERY_CHARS = 4000  # REST and SearchService
MAX_TOOL_QUERY_CHARS = 1000  # the memory_search agent tool
