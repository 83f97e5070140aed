"""An integer argument of the in-process tools is read as MCP reads it (one rule,
``agent.json_numbers``): ``5.0`` is an integer, as JSON Schema counts one, and a framework
that decodes a model's ``"top_k": 5.0`` passes a float; ``5.5``, ``true`` and ``"5"`` are
refused with the value sent, in MCP's words (``tests/mcp/test_tool_numbers.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.search import SearchService
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.sync import SyncService
from tests.agent.tool_support import DAY
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio


@pytest.fixture
async def searching(
    sync: SyncService, db: Database, user_box: LocalDirectorySandbox
) -> MemoryTools:
    await sync.start_session(USER)
    searcher = SearchService(IndexCache(db.sessions, 8))
    tools = MemoryTools(
        ToolContext.bind(USER, sync, user_box), searcher=searcher, today=lambda: DAY
    )
    await tools.record_memory("The user's cat is called Miso", section="Decisions")
    return tools


async def test_an_integral_float_is_an_integer(searching: MemoryTools) -> None:
    as_json = await searching.call("memory_search", json.dumps({"query": "Miso", "top_k": 1.0}))
    as_dict = await searching.call("memory_search", {"query": "Miso", "top_k": 1.0})
    direct = await searching.memory_search("Miso", top_k=1.0)  # type: ignore[arg-type]

    assert not as_json.failed and as_json.startswith("1. [MEMORY.md")
    assert "\n2. [" not in as_json  # one hit: top_k was 1
    assert as_dict == as_json == direct


@pytest.mark.parametrize(
    ("top_k", "message"),
    [
        (5.5, "error: top_k must be a JSON integer; got 5.5"),
        (True, "error: top_k must be a JSON integer; got true"),
        ("5", 'error: top_k must be a JSON integer: send 5, not "5"'),
        ("five", 'error: top_k must be a JSON integer; got "five"'),
        ([1], "error: top_k must be a JSON integer; got [1]"),
    ],
)
async def test_other_values_are_refused_in_mcps_words(
    searching: MemoryTools, top_k: Any, message: str
) -> None:
    called = await searching.call("memory_search", {"query": "Miso", "top_k": top_k})
    direct = await searching.memory_search("Miso", top_k=top_k)
    assert called.failed and called == message
    assert direct == message
