"""A tool's edit stored in the DB alone (its sandbox write failed) on a sandbox another open
session shares keeps the copies that session's agent may have read.

``db_only.store_edit`` carries the sandbox copy's own unstored edit into the DB and then
records the copy it carried as the new base. That record forgot the copies the old record
named — a copy a person's pushed edit replaced, which an agent of the other open session may
have read. That agent's whole-file write of it was then read against the carried copy alone,
and the person's edit, the unstored edit and the tool's entry were lost. While another
session holds the sandbox (``ReadBackMarks.another_holds``), the carried record keeps them.

Real database, real directory sandboxes.
"""

from __future__ import annotations

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.dirty import RoundTracker, SeenBase
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.results import SandboxEdit
from memstrata.sandbox.rule import SyncBase
from memstrata.sandbox.state import read_base
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

BASE = "# User\n\n## Profile\n- Name: Ada\n- Pronouns: she\n\n## Work\n- Job: none\n- Team: core\n"
HUMAN = "- human: prefers tea\n"
UNSAVED = "- unsaved: a line the agent wrote by hand\n"
ENTRY = "- entry: the memory tool's\n"


def add(text: str) -> str:
    """The tool's entry, in the Work section."""
    return text.replace("- Job: none\n", "- Job: none\n" + ENTRY)


@pytest.mark.parametrize("shared", [True, False], ids=["another session open", "alone"])
async def test_a_db_only_write_keeps_the_copy_another_open_session_read(
    store: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    shared: bool,
) -> None:
    sync = SyncService(store, provider)
    await sync.frontend_edit(USER, "user", BASE)
    await sync.start_session(USER)  # the writer's session
    if shared:
        await sync.start_session(USER)  # the reader's, on the same sandbox
    read_by_reader = await user_box.read_text("USER.md")  # the reader's agent reads it
    assert read_by_reader == BASE
    stored, _ = await sync.read_file(USER, FileKind.USER)
    await sync.frontend_edit(USER, "user", BASE + HUMAN, stored.version)  # pushed
    copy = BASE + HUMAN + UNSAVED  # the writer's unguarded edit, not read back yet
    await user_box.write_text("USER.md", copy)

    result = await sync.write_without_sandbox(
        USER, FileKind.USER, add, edited=SandboxEdit(copy, add(copy)), sandbox=user_box
    )

    assert result.outcome is Outcome.WRITTEN
    record = await read_base(user_box, "USER.md")
    assert record is not None and record.content == copy
    if not shared:
        assert record.older == ()  # alone, the carried copy is the agent's: settled, as before
        return
    # The reader's agent writes back the whole copy it read, one line changed.
    await user_box.write_text("USER.md", read_by_reader.replace("she", "she/her"))

    read_back = await sync.after_controlled_write(USER, "USER.md")

    # Merged from the copy the reader read: the person's edit, the unsaved line and the
    # tool's entry stay (from the carried copy alone, the reader's copy removed the first
    # two, and the merge stored that).
    content = (await sync.read_file(USER, FileKind.USER))[0].content
    assert (read_back.outcome, content) == (
        Outcome.MERGED,
        add(copy).replace("she", "she/her"),
    )


def test_a_db_only_writes_base_keeps_the_copies_it_names() -> None:
    """The tool's tracker compares its copy with the carried base from now on: with the
    copies a shared record keeps, or its own round end would read another session's
    agent's whole-file write against the carried copy alone."""
    tracker = RoundTracker(USER)
    carried = SyncBase(3, BASE + HUMAN, older=(BASE,))

    tracker.fall_behind("USER.md", carried)

    assert (tracker.base("USER.md"), tracker.is_behind("USER.md")) == (
        SeenBase(3, BASE + HUMAN, (BASE,)),
        True,
    )
