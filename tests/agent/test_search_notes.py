"""The in-process ``memory_search`` answers what the MCP tool answers: the hit lines, then
a ``note:`` line per warning of the search (``agent.answers.search_text``). Without them a
library with no embedding API searched with BM25 only, and a query of symbols matched
nothing by keywords, without its agent being told."""

from __future__ import annotations

import pytest

from memstrata.agent.answers import search_text
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.search_warnings import NO_EMBEDDING_API, NO_SEARCHABLE_WORDS
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.sync import SyncService
from tests.agent.tool_support import DAY
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio


async def test_the_search_warnings_end_the_answer_as_over_mcp(
    sync: SyncService, db: Database, user_box: LocalDirectorySandbox
) -> None:
    await sync.start_session(USER)
    searcher = SearchService(IndexCache(db.sessions, 8))  # no embedding API: BM25 only
    tools = MemoryTools(
        ToolContext.bind(USER, sync, user_box), searcher=searcher, today=lambda: DAY
    )
    await tools.record_memory("The user drinks 🍵 oolong every morning", section="Habits")

    found = await tools.memory_search("oolong", top_k=1)
    assert found.startswith("1. [MEMORY.md · ") and "oolong every morning" in found
    assert found.endswith(f"\nnote: {NO_EMBEDDING_API}")
    assert not found.failed

    symbols = await tools.memory_search("🍵")
    assert symbols == (
        f"No matching memories.\nnote: {NO_EMBEDDING_API}\nnote: {NO_SEARCHABLE_WORDS}"
    )
    # One formatter for both hosts: the MCP tool's text for the same search.
    result = searcher.search(USER, "oolong", top_k=1)
    assert found == search_text(result.hits, "oolong", result.warnings)
