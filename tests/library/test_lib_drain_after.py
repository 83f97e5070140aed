"""Writes after ``drain()``: stored as text without a vector (drain cannot be undone; it
is for shutting down), and said once, at WARNING, naming ``drain`` — each write used to
log its own warnings ("the server is stopping"), a dozen for a few writes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.runtime import Memstrata

USER = "drained-user"


def test_writes_after_drain_warn_once_naming_drain(
    open_runtime: Callable[..., Memstrata],
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mem = open_runtime(embedder)
    mem.store.provision_default_files(USER)
    assert asyncio.run(mem.drain(1.0)) == 0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memstrata"):
        for i in range(3):
            mem.indexer.index_turn(USER, "s", i, f"question {i} about tea", f"answer {i}")
        stored = mem.store.get_memory_file(USER, "memory")
        assert stored is not None
        mem.store.upsert_memory_file(USER, "memory", stored.content + "\n- Likes green tea\n")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "drain" in warnings[0].getMessage() + str(warnings[0].__dict__), warnings[0].__dict__
    # Stored all the same, as text: BM25 finds the turn.
    assert mem.search.search(USER, "question 2 about tea", top_k=3).hits
