"""SyncService on a real database and real directories: a session's start (sandbox content
written back first, then the DB's pushed), unreadable and foreign-encoded files."""

from __future__ import annotations

import codecs
import errno
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.errors import SandboxError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import Outcome, SyncService
from memstrata.sandbox.timed import with_deadline
from tests.sandbox.support import (
    USER,
    FaultyProvider,
    RecordingIndexer,
    unreachable_store,
    warning_events,
)

pytestmark = pytest.mark.anyio


def outcomes(results: list) -> dict[str, Outcome]:  # type: ignore[type-arg]
    return {r.filename: r.outcome for r in results}


# -- scenarios 4 and 5: session start --------------------------------------------------------


async def test_first_session_of_a_new_user_pushes_db_and_agents(
    sync: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    indexer: RecordingIndexer,
) -> None:
    results = await sync.start_session(USER, "s1")
    box = provider.for_user(USER, "s1")
    assert outcomes(results) == {
        "SOUL.md": Outcome.PUSHED,
        "USER.md": Outcome.PUSHED,
        "MEMORY.md": Outcome.PUSHED,
        "AGENTS.md": Outcome.PUSHED,
    }
    for kind in (FileKind.SOUL, FileKind.USER, FileKind.MEMORY):
        assert await box.read_text(kind.filename) == templates.load(kind)
    assert await box.read_text("AGENTS.md") == templates.agents_md()
    assert sorted(k.filename for _, k, _ in indexer.calls) == ["MEMORY.md", "USER.md"]


async def test_session_start_writes_sandbox_content_back_first(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    await sync.provision_user(USER)
    await user_box.write_text("USER.md", "- Name: Lin\n")  # edited, e.g. by a previous agent

    results = await sync.start_session(USER)

    assert outcomes(results)["USER.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == ("- Name: Lin\n", 2)


@pytest.mark.parametrize(
    "emptied",
    ["\u200e\n", "\u200f\n", "\u061c", "\u00ad", "\ufe0f", "\ufeff\u200f \u0301\n"],
    ids=["LRM", "RLM", "ALM", "soft-hyphen", "VS16", "mixed"],
)
async def test_a_file_emptied_down_to_invisible_marks_never_empties_the_db_row(
    emptied: str, sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    # An RTL editor that empties a file can leave its bidi marks behind; each of these once
    # replaced the whole USER.md in the DB, and no earlier version is kept to go back to.
    await sync.start_session(USER)
    before = store.get_memory_file(USER, FileKind.USER)
    assert before is not None
    await user_box.write_text("USER.md", emptied)

    results = await sync.start_session(USER)

    assert outcomes(results)["USER.md"] is Outcome.PUSHED
    assert store.get_memory_file(USER, FileKind.USER) == before
    assert await user_box.read_text("USER.md") == before.content


async def test_session_start_without_a_base_record_is_plain_sandbox_first(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    # A workspace that predates memstrata: content but no .memstrata/base record.
    await user_box.write_text("MEMORY.md", "old workspace notes\n")
    results = await sync.start_session(USER)
    assert outcomes(results)["MEMORY.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == ("old workspace notes\n", 2)


async def test_session_start_with_matching_copies_changes_nothing(
    sync: SyncService, store: MemoryStore
) -> None:
    await sync.start_session(USER)
    results = await sync.start_session(USER)
    assert outcomes(results) == {
        "SOUL.md": Outcome.UNCHANGED,
        "USER.md": Outcome.UNCHANGED,
        "MEMORY.md": Outcome.UNCHANGED,
        "AGENTS.md": Outcome.PUSHED,
    }
    assert {f.version for f in store.list_memory_files(USER)} == {1}


async def test_session_start_refreshes_a_lagging_sandbox_instead_of_reverting_the_db(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    sync = SyncService(store, provider)
    await sync.start_session(USER)
    # A frontend edit whose push failed: DB at version 2, sandbox still at version 1.
    broken = SyncService(store, FaultyProvider(provider, error=OSError(errno.EIO, "I/O error")))
    await broken.frontend_edit(USER, "user", "- Name: Newer\n")

    results = await sync.start_session(USER)

    assert outcomes(results)["USER.md"] is Outcome.PUSHED
    assert await user_box.read_text("USER.md") == "- Name: Newer\n"
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and (stored.content, stored.version) == ("- Name: Newer\n", 2)


async def test_session_start_overwrites_agents_md_and_never_stores_it(
    sync: SyncService, db: Database, templates: TemplateSet, user_box: LocalDirectorySandbox
) -> None:
    await user_box.write_text("AGENTS.md", "my own rules\n")
    await sync.start_session(USER)
    assert await user_box.read_text("AGENTS.md") == templates.agents_md()
    with db.engine.connect() as conn:
        types = conn.execute(text("SELECT file_type FROM user_memory ORDER BY file_type"))
        assert [r[0] for r in types] == ["memory_md", "soul_md", "user_md"]


async def test_session_start_with_the_db_unreachable_leaves_the_sandbox_alone(
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    await user_box.write_text("MEMORY.md", "local only\n")
    sync = SyncService(unreachable_store(templates), provider)

    results = await sync.start_session(USER)

    assert outcomes(results) == {
        "SOUL.md": Outcome.DB_UNAVAILABLE,
        "USER.md": Outcome.DB_UNAVAILABLE,
        "MEMORY.md": Outcome.DB_UNAVAILABLE,
        "AGENTS.md": Outcome.PUSHED,
    }
    assert await user_box.read_text("MEMORY.md") == "local only\n"
    assert [w["result"] for w in warning_events(logs)] == ["db_unavailable"] * 3


async def test_session_start_with_a_template_missing(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    tmp_path: Path,
    templates: TemplateSet,
    user_box: LocalDirectorySandbox,
) -> None:
    partial = tmp_path / "templates"
    partial.mkdir()
    for kind in (FileKind.SOUL, FileKind.USER, FileKind.MEMORY):
        (partial / kind.filename).write_text(templates.load(kind), encoding="utf-8")
    sync = SyncService(store, provider, templates=TemplateSet(partial))
    results = await sync.start_session(USER)
    agents = results[-1]
    assert (agents.filename, agents.outcome) == ("AGENTS.md", Outcome.TEMPLATE_MISSING)
    assert "MEMSTRATA_TEMPLATE_DIR" in (agents.detail or "")
    assert await user_box.read_text("AGENTS.md") is None


async def test_sandbox_read_failure_is_reported_not_raised(
    store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    faulty = FaultyProvider(
        provider,
        error=SandboxError("'MEMORY.md' is not valid UTF-8"),
        fail=lambda path, op: path == "MEMORY.md" and op == "read",
    )
    sync = SyncService(store, faulty)
    results = await sync.start_session(USER)
    assert outcomes(results)["MEMORY.md"] is Outcome.SANDBOX_FAILED
    assert outcomes(results)["USER.md"] is Outcome.PUSHED


async def test_a_file_that_is_not_utf8_is_kept_aside_and_the_db_copy_restored(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    await sync.start_session(USER)
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None
    # An agent's shell tool wrote Latin-1: it failed every read-back and stayed so for good.
    raw = "- caf\xe9 au lait\n".encode("latin-1")
    (provider.directory_for(USER) / "MEMORY.md").write_bytes(raw)

    results = await sync.start_session(USER)

    assert outcomes(results)["MEMORY.md"] is Outcome.REJECTED
    assert await user_box.read_text("MEMORY.md") == stored.content
    [copy] = await user_box.list(".memstrata/conflicts/")
    assert copy.endswith(".rejected.md")
    assert (provider.directory_for(USER) / copy).read_bytes() == raw
    after = store.get_memory_file(USER, FileKind.MEMORY)
    assert after is not None and after.version == stored.version


MEMORY_ZH = "# MEMORY\n\n## Notes\n- 2026-01-01: 我喜欢喝乌龙茶，住在杭州。\n"


MEMORY_JA = "# MEMORY\n- 東京でラーメンを食べた\n"


@pytest.mark.parametrize("deadline", [False, True], ids=["plain", "with-deadline"])
@pytest.mark.parametrize(
    "raw",
    [MEMORY_ZH.encode("gbk"), MEMORY_JA.encode("shift_jis"), MEMORY_ZH.encode("utf-16-le")],
    ids=["gbk", "shift-jis", "utf-16-without-mark"],
)
async def test_a_file_in_another_encoding_is_kept_aside_byte_for_byte(
    raw: bytes, deadline: bool, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # Only a copy with U+FFFD for every byte that did not decode used to be kept: each
    # Chinese or Japanese character of the agent's edit was lost for good. The bytes also
    # reach the directory through the deadline's wrapper, which every Memstrata has.
    sync = SyncService(store, with_deadline(provider, 5.0) if deadline else provider)
    await sync.start_session(USER)
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None
    (provider.directory_for(USER) / "MEMORY.md").write_bytes(raw)

    results = await sync.start_session(USER)

    assert outcomes(results)["MEMORY.md"] is Outcome.REJECTED
    [copy] = (provider.directory_for(USER) / ".memstrata" / "conflicts").iterdir()
    assert copy.name.endswith(".rejected.md") and copy.read_bytes() == raw
    assert (provider.directory_for(USER) / "MEMORY.md").read_text("utf-8") == stored.content
    assert store.get_memory_file(USER, FileKind.MEMORY) == stored


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
async def test_a_utf16_file_with_a_byte_order_mark_is_read_as_text(
    encoding: str, sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # Windows PowerShell 5 writes UTF-16 with a mark; the mark leaves no doubt about it.
    await sync.start_session(USER)
    data = MEMORY_ZH.encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    (provider.directory_for(USER) / "MEMORY.md").write_bytes(data)

    results = await sync.start_session(USER)

    assert outcomes(results)["MEMORY.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (MEMORY_ZH, 2)
    again = await sync.start_session(USER)
    assert outcomes(again)["MEMORY.md"] is Outcome.UNCHANGED
