"""What `memstrata db restored` does to the copies a restore does not reach: sandboxes that
hold a newer copy of a memory file than the restored database (edited after the backup) or
an older one, and the search index of a process that ran across the restore. Real
``pg_dump`` / ``pg_restore``, the real sync service and search of ``Memstrata`` runtimes on
the drill's database, real sandbox directories.

The sandbox's base record from before the restore names a version the restored database
may reach again; the lift makes it older than the version memstrata noted for the file
(``sandbox_synced``, lifted too), so it is not trusted (``sandbox.rule.trusted``) and the
server's note decides: the sandbox copy is written back over the version noted, kept aside
over any other. Without the lift a copy edited after the backup was overwritten by the DB
copy once an edit after the restore brought the file back to the record's version.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from memstrata.db.restored import RESTORE_STEP
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from memstrata.sandbox.results import Outcome, SyncResult
from memstrata.sandbox.state import CONFLICT_DIR
from tests.sandbox.support import anyio_backend  # noqa: F401  (a fixture)

from .restore_drill import Drill, drill  # noqa: F401  (a fixture)

pytestmark = pytest.mark.anyio

USER = "alice"
MEMORY = FileKind.MEMORY
BACKED_UP = "# Memory\n\n- plan A\n"  # version 2, in the backup
AFTER_BACKUP = "# Memory\n\n- plan A\n- plan B, decided after the backup\n"  # version 3, lost
AFTER_RESTORE = "# Memory\n\n- plan C, decided after the restore\n"


@contextmanager
def replica(d: Drill) -> Iterator[Memstrata]:
    """A process on the drill's database (BM25 only), its sandboxes in the test's root."""
    mem = Memstrata.open(d.settings, embedder=None)
    try:
        yield mem
    finally:
        mem.close()


def stored(mem: Memstrata) -> tuple[str, int]:
    file = mem.store.get_memory_file(USER, MEMORY)
    assert file is not None
    return file.content, file.version


def memory_result(results: list[SyncResult]) -> SyncResult:
    return next(r for r in results if r.filename == MEMORY.filename)


def kept_aside(box: Path) -> list[str]:
    return [p.read_text() for p in sorted((box / CONFLICT_DIR).glob(f"{MEMORY.filename}.*"))]


async def session_ahead_of_the_backup(d: Drill) -> Path:
    """Session S open while MEMORY.md went to version 2 (dumped), then 3: S holds 3."""
    with replica(d) as mem:
        await mem.sync.start_session(USER, "S")
        await mem.sync.frontend_edit(USER, MEMORY, BACKED_UP, expected_version=1)
        d.dump()
        await mem.sync.frontend_edit(USER, MEMORY, AFTER_BACKUP, expected_version=2)
        box = mem.sandbox_directory(USER, "S")
    assert (box / MEMORY.filename).read_text() == AFTER_BACKUP
    return box


async def test_a_sandbox_copy_newer_than_the_restore_is_written_back(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    box = await session_ahead_of_the_backup(drill)
    drill.restore()
    drill.restored(monkeypatch, tmp_path)

    with replica(drill) as mem:
        result = memory_result(await mem.sync.start_session(USER, "S"))
        assert (result.outcome, result.version) == (Outcome.WRITTEN, 3 + RESTORE_STEP)
        assert stored(mem) == (AFTER_BACKUP, 3 + RESTORE_STEP)
    assert kept_aside(box) == []


async def test_a_newer_sandbox_copy_is_kept_aside_once_the_file_was_edited_after_the_restore(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The file edited after the restore reaches version 3 again without the lift, the
    version of the sandbox's record: the record was trusted, and the restored DB copy
    pushed over the sandbox's, which nothing else held."""
    box = await session_ahead_of_the_backup(drill)
    drill.restore()
    drill.restored(monkeypatch, tmp_path)

    with replica(drill) as mem:
        _, version = stored(mem)
        await mem.sync.frontend_edit(USER, MEMORY, AFTER_RESTORE, expected_version=version)
        result = memory_result(await mem.sync.start_session(USER, "S"))

        assert result.outcome is Outcome.CONFLICT
        assert stored(mem) == (AFTER_RESTORE, 3 + RESTORE_STEP)
    assert kept_aside(box) == [AFTER_BACKUP]
    assert (box / MEMORY.filename).read_text() == AFTER_RESTORE


async def test_a_sandbox_copy_older_than_the_restore_is_not_written_over_it(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """S closed at version 1; the file edited to 2 while it was closed, then dumped."""
    with replica(drill) as mem:
        await mem.sync.start_session(USER, "S")
        box = mem.sandbox_directory(USER, "S")
        older = (box / MEMORY.filename).read_text()
        mem.sync.end_session(USER, "S")
        await mem.sync.frontend_edit(USER, MEMORY, BACKED_UP, expected_version=1)
        drill.dump()
    drill.restore()
    drill.restored(monkeypatch, tmp_path)

    with replica(drill) as mem:
        await mem.sync.start_session(USER, "S")
        assert stored(mem) == (BACKED_UP, 2 + RESTORE_STEP)
    assert (box / MEMORY.filename).read_text() == BACKED_UP
    # Its record no longer trusted, the older copy is kept aside rather than recognised as
    # one memstrata pushed: a copy too many, nothing lost.
    assert kept_aside(box) == [older]


def hits(mem: Memstrata, query: str) -> list[str]:
    return [h.text for h in mem.search.search(USER, query).hits]


def test_a_process_running_across_the_restore_reloads_its_search_index(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Its index held a round the restore took away; the restored generation, reached
    again by one write after the restore, would have passed it for current (the round
    written after the restore missed, the lost one still found)."""
    with replica(drill) as running:
        running.import_rounds(USER, [Round("s", 0, "apricot jam before the backup")])
        drill.dump()
        running.import_rounds(USER, [Round("s", 1, "bilberry pie after the backup")])
        assert len(hits(running, "bilberry")) == 1  # the index is loaded, and holds it

        drill.restore()
        drill.restored(monkeypatch, tmp_path)
        with replica(drill) as started:  # a replica started after the restore writes
            started.import_rounds(USER, [Round("s", 1, "cherry tart after the restore")])

        assert hits(running, "bilberry") == []
        apricot = "User: apricot jam before the backup"
        assert hits(running, "cherry") == [f"{apricot}\nUser: cherry tart after the restore"]
        assert apricot in hits(running, "apricot")
