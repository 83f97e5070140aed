"""A kept-aside copy's preview shows what the copy changed, not the template header every
copy of a file starts with (``memstrata.memory.conflicts.preview_of``, ``list_copies``).

Every MEMORY.md copy used to preview as its first 3 lines: the template's front matter,
the same for all. Against the real database (the DB copy each preview is compared with),
real directory sandboxes; the only fakes inject a failing database and count its reads.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from sqlalchemy.exc import OperationalError

from memstrata.memory.async_store import AsyncStore
from memstrata.memory.conflicts import list_copies, preview_of
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.state import CONFLICT_DIR, utc_stamp

USER = "ada"
HEADER = "---\nfile: MEMORY.md\npurpose: the agent's memory\n---\n# MEMORY.md\n\n## Decisions\n"
STORED = HEADER + "- tea, not coffee\n\n## Notes\n- lives in Lyon\n"
START = datetime(2026, 3, 1, 12, tzinfo=UTC)


def plant(provider: LocalSandboxProvider, kind: FileKind, minute: int, text: str) -> str:
    name = f"{kind.filename}.{utc_stamp(lambda: START + timedelta(minutes=minute))}.md"
    directory = provider.directory_for(USER) / CONFLICT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    return name


class CountingStore(AsyncStore):
    """The real store's reads, counted (``fail``: each raises, as a database that is down)."""

    def __init__(self, store: MemoryStore, *, fail: bool = False) -> None:
        super().__init__(store)
        self.reads: list[FileKind] = []
        self.fail = fail

    async def get(self, user_id: str, kind: FileKind) -> MemoryFile | None:
        self.reads.append(kind)
        if self.fail:
            raise OperationalError("SELECT", {}, Exception("connection refused"))
        return await super().get(user_id, kind)


def test_the_preview_is_the_first_lines_the_stored_copy_has_not() -> None:
    copy = STORED.replace("- lives in Lyon\n", "- lives in Marseille\n- has a cat\n\n- rides\n")
    assert preview_of(copy, STORED) == "- lives in Marseille\n- has a cat\n- rides"
    assert preview_of(copy) == "---\nfile: MEMORY.md\npurpose: the agent's memory"
    assert preview_of(STORED, STORED) == "---\nfile: MEMORY.md\npurpose: the agent's memory"
    assert preview_of(HEADER + "x" * 500 + "\n", STORED) == "x" * 240


def test_copies_of_one_file_preview_apart_with_one_read_per_file(
    store: MemoryStore, tmp_path: Path
) -> None:
    provider = LocalSandboxProvider(tmp_path / "boxes")
    store.upsert_memory_file(USER, FileKind.MEMORY, STORED, None)
    store.upsert_memory_file(USER, FileKind.USER, "# USER\n- name: Ada\n", None)
    plant(provider, FileKind.MEMORY, 1, STORED.replace("Lyon", "Marseille"))
    plant(provider, FileKind.MEMORY, 2, STORED + "- prefers trains\n")
    plant(provider, FileKind.MEMORY, 3, STORED)  # nothing changed: its first lines
    plant(provider, FileKind.USER, 4, "# USER\n- name: Ada Lovelace\n")
    plant(provider, FileKind.SOUL, 5, "# SOUL\n- be brief\n")  # no stored SOUL.md
    db = CountingStore(store)

    page = anyio.run(lambda: list_copies(provider, USER, db=db))

    assert [(s.copy.kind, s.preview) for s in page.copies] == [
        (FileKind.SOUL, "# SOUL\n- be brief"),
        (FileKind.USER, "- name: Ada Lovelace"),
        (FileKind.MEMORY, "---\nfile: MEMORY.md\npurpose: the agent's memory"),
        (FileKind.MEMORY, "- prefers trains"),
        (FileKind.MEMORY, "- lives in Marseille"),
    ]
    assert sorted(k.filename for k in db.reads) == ["MEMORY.md", "SOUL.md", "USER.md"]
    assert (page.sandbox, page.warnings) == ("ok", [])


def test_a_database_that_fails_leaves_the_first_lines(
    store: MemoryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = LocalSandboxProvider(tmp_path / "boxes")
    plant(provider, FileKind.MEMORY, 1, STORED + "- prefers trains\n")
    db = CountingStore(store, fail=True)

    page = anyio.run(lambda: list_copies(provider, USER, db=db))

    assert [s.preview for s in page.copies] == ["---\nfile: MEMORY.md\npurpose: the agent's memory"]
    assert (page.total, page.sandbox, page.warnings) == (1, "ok", [])
    assert db.reads == [FileKind.MEMORY]
    assert "conflicts.db_copy_unread" in caplog.text
