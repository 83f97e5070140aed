"""A name the library refuses for a write is refused for a read too, with the same error:
``get_memory_file(user, "AGENTS.md")`` answered None (a read of a legacy row the user never
has), which a platform took for "the user has no AGENTS.md yet", while the write of that
name says to read the platform's template instead. The legacy ``agents_md`` row an older
database may hold stays readable under the name docs/LIBRARY.md gives it (``"agents"``,
``FileKind.AGENTS``). Against the real store and database."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import InvalidFileTypeError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore

NAMES = ["AGENTS.md", "agents.md", "Agents", "AGENTS", "agents_md", "Agents.MD"]


@pytest.mark.parametrize("name", NAMES)
def test_a_read_of_a_name_refused_for_writes_raises_the_writes_error(
    store: MemoryStore, name: str
) -> None:
    with pytest.raises(InvalidFileTypeError) as write:
        store.upsert_memory_file("alice", name, "# AGENTS.md\n")
    with pytest.raises(InvalidFileTypeError) as read:
        store.get_memory_file("alice", name)
    assert str(read.value) == str(write.value)
    assert "mem.templates.agents_md()" in str(read.value)


@pytest.mark.parametrize("name", NAMES)
def test_the_legacy_row_is_read_under_its_documented_name_only(
    store: MemoryStore, db: Database, name: str
) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO user_memory (user_id, file_type, content) "
                "VALUES ('old', 'agents_md', 'legacy')"
            )
        )
    for documented in ("agents", FileKind.AGENTS):
        legacy = store.get_memory_file("old", documented)
        assert legacy is not None and legacy.content == "legacy"
    with pytest.raises(InvalidFileTypeError, match="platform template"):
        store.get_memory_file("old", name)
