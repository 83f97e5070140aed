"""A memory file that is a symlink is never followed: a push replaces the link with a
regular file, and a read-back refuses it (``sandbox_failed``, naming the link and where it
leads) instead of taking the file it leads to for an edit. An agent's ``ln -sf MEMORY.md
AGENTS.md`` once had the next session start write the AGENTS.md template into MEMORY.md,
and ``ln -sf USER.md MEMORY.md`` had a MEMORY push overwrite USER.md. Real PostgreSQL,
real directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.agent.session import open_agent_session
from memstrata.errors import SandboxError
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import READ_BACKS, USER, by_file, read_back_via

pytestmark = pytest.mark.anyio

MEMORY_FILES = [kind.filename for kind in FileKind]
PENICILLIN = "Allergic to penicillin"


def link(directory: Path, name: str, target: str) -> None:
    """``ln -sf target name`` in ``directory``."""
    (directory / name).unlink(missing_ok=True)
    (directory / name).symlink_to(target)


def stored(store: MemoryStore, kind: FileKind) -> str:
    file = store.get_memory_file(USER, kind)
    assert file is not None
    return file.content


# -- the provider -------------------------------------------------------------------------


@pytest.mark.parametrize("name", MEMORY_FILES)
async def test_a_write_replaces_a_memory_file_link_instead_of_its_target(
    tmp_path: Path, name: str
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("notes.md", "the agent's notes\n")
    link(box.root, name, "notes.md")

    await box.write_text(name, "pushed\n")

    assert not (box.root / name).is_symlink()
    assert (box.root / name).read_text() == "pushed\n"
    assert (box.root / "notes.md").read_text() == "the agent's notes\n"


async def test_a_write_replaces_a_dangling_memory_file_link_without_creating_its_target(
    tmp_path: Path,
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    box.root.mkdir()
    link(box.root, "MEMORY.md", "later.md")

    await box.write_text("MEMORY.md", "pushed\n")

    assert (box.root / "MEMORY.md").read_text() == "pushed\n"
    assert not (box.root / "MEMORY.md").is_symlink()
    assert not (box.root / "later.md").exists()


@pytest.mark.parametrize("name", MEMORY_FILES)
@pytest.mark.parametrize("target", ["another memory file", "notes/mine.md", "missing.md"])
async def test_a_read_refuses_a_memory_file_link_and_names_where_it_leads(
    tmp_path: Path, name: str, target: str
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("USER.md", "- Allergy: peanuts\n")
    await box.write_text("SOUL.md", "- Tone: warm\n")
    await box.write_text("notes/mine.md", "mine\n")
    if target == "another memory file":
        target = "SOUL.md" if name == "USER.md" else "USER.md"
    link(box.root, name, target)

    with pytest.raises(SandboxError) as caught:
        await box.read_text(name)

    message = str(caught.value)
    assert f"{name!r} is a symlink to {target!r}" in message
    assert "not followed" in message
    assert (box.root / name).is_symlink()  # a read changes nothing
    assert (box.root / target).exists() is (target != "missing.md")


async def test_other_files_still_follow_links_inside_the_sandbox(tmp_path: Path) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("USER.md", "- Name: Lin\n")
    link(box.root, "user-notes.md", "USER.md")
    assert await box.read_text("user-notes.md") == "- Name: Lin\n"


# -- ln -sf MEMORY.md AGENTS.md, then the next session starts ------------------------------


@pytest.mark.parametrize("saved_by", ["record_memory", "frontend edit"])
async def test_an_agents_md_link_to_memory_md_never_turns_memory_into_the_template(
    sync: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    saved_by: str,
) -> None:
    first = await open_agent_session(sync, USER, token_limit=50_000)
    if saved_by == "record_memory":
        answer = await first.tools.call("record_memory", {"content": PENICILLIN})
        assert str(answer).startswith("Recorded in MEMORY.md"), answer
    else:
        memory = store.get_memory_file(USER, FileKind.MEMORY)
        assert memory is not None
        edited = memory.content + f"- 2026-01-02: {PENICILLIN}\n"
        await sync.frontend_edit(USER, "memory", edited, expected_version=memory.version)
    saved = stored(store, FileKind.MEMORY)
    assert PENICILLIN in saved
    home = provider.directory_for(USER)
    link(home, "AGENTS.md", "MEMORY.md")
    first.close()

    second = await open_agent_session(sync, USER, token_limit=50_000)
    starts = by_file(second.start_results)
    second.close()
    third = await open_agent_session(sync, USER, token_limit=50_000)
    third.close()

    assert starts["AGENTS.md"].outcome is Outcome.PUSHED
    assert starts["MEMORY.md"].outcome is Outcome.UNCHANGED
    assert {r.outcome for r in third.start_results} == {Outcome.UNCHANGED, Outcome.PUSHED}
    assert not (home / "AGENTS.md").is_symlink()
    assert (home / "AGENTS.md").read_text() == templates.agents_md()
    assert (home / "MEMORY.md").read_text() == saved
    assert stored(store, FileKind.MEMORY) == saved
    assert not (home / ".memstrata" / "conflicts").exists()


# -- ln -sf USER.md MEMORY.md in a session's sandbox --------------------------------------


@pytest.fixture
async def linked(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> LocalDirectorySandbox:
    """Session ``s1``'s sandbox, USER.md filled in, MEMORY.md a link to USER.md."""
    await sync.start_session(USER)
    user = store.get_memory_file(USER, FileKind.USER)
    assert user is not None
    content = user.content + "\n- Name: Alice\n- Allergy: peanuts\n"
    await sync.frontend_edit(USER, "user", content, expected_version=user.version)
    await sync.start_session(USER, "s1")
    box = provider.for_user(USER, "s1")
    link(box.root, "MEMORY.md", "USER.md")
    return box


async def test_a_memory_push_replaces_the_link_and_leaves_user_md_alone(
    sync: SyncService, store: MemoryStore, linked: LocalDirectorySandbox
) -> None:
    user_before = stored(store, FileKind.USER)
    memory = store.get_memory_file(USER, FileKind.MEMORY)
    assert memory is not None

    edited = memory.content + "- 2026: moved to Lyon\n"
    await sync.frontend_edit(USER, "memory", edited, expected_version=memory.version)
    sync.end_session(USER, "s1")
    read_back = by_file(await sync.read_back_session(USER, "s1"))

    assert not (linked.root / "MEMORY.md").is_symlink()
    assert (linked.root / "MEMORY.md").read_text() == edited
    assert (linked.root / "USER.md").read_text() == user_before
    assert {r.outcome for r in read_back.values()} == {Outcome.UNCHANGED}
    assert stored(store, FileKind.USER) == user_before
    assert stored(store, FileKind.MEMORY) == edited


@pytest.mark.parametrize("via", READ_BACKS)
async def test_a_read_back_reports_the_link_and_stores_nothing_through_it(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    linked: LocalDirectorySandbox,
    via: str,
) -> None:
    before = {kind: store.get_memory_file(USER, kind) for kind in USER_FILE_KINDS}
    results = await read_back_via(sync, via)

    memory = results["MEMORY.md"]
    assert memory.outcome is Outcome.SANDBOX_FAILED
    assert memory.detail is not None and "'MEMORY.md' is a symlink to 'USER.md'" in memory.detail
    assert {kind: store.get_memory_file(USER, kind) for kind in before} == before
    assert (linked.root / "MEMORY.md").is_symlink()  # the person's, or the agent's, to remove
    assert "- Allergy: peanuts\n" in (linked.root / "USER.md").read_text()
