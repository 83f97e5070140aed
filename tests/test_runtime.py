"""The composition root end to end: one runtime, an agent session, memory search."""

from __future__ import annotations

import asyncio

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata


def test_unknown_parts_are_refused(db: Database, settings: Settings) -> None:
    with pytest.raises(TypeError, match="embeder"):
        Memstrata.open(settings, database=db, embeder=None)


def test_agent_session_remembers_and_searches(db: Database, settings: Settings) -> None:
    mem = Memstrata.open(settings, database=db, embedder=None)

    async def scenario() -> tuple[str, str, str]:
        session = await mem.open_agent_session("alice", token_limit=8000)
        assert "AGENTS.md" in session.prompt.text and "SOUL.md" in session.prompt.text
        recorded = await session.tools.call(
            "record_memory", {"content": "Alice's cat is called Pixel"}
        )
        found = await session.tools.call("memory_search", {"query": "cat Pixel"})
        await session.end_round()
        return recorded, found, session.prompt.text

    recorded, found, _ = asyncio.run(scenario())
    assert "Pixel" in found, (recorded, found)
    stored = mem.store.get_memory_file("alice", "memory")
    assert stored is not None and "Alice's cat is called Pixel" in stored.content
    mem.pool.close()  # the shared ``db`` fixture outlives this runtime
