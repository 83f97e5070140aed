"""An agent that changes a line a person's edit just brought is never stored as both lines.

Found by a drill: a person adds "- Has a dog named Rex" (a frontend edit, pushed into the
sandbox); the agent changes it to "cat"; the read-back reported ``merged`` and the DB held
both lines. The base record still named the copy before the push (``SyncBase.older``), the
sandbox text lacked the pushed line, so the merge started from that copy and its append
rule kept both "new" lines.

* A session that starts after the push saw the pushed copy in its sandbox: nothing its
  agent writes was read before the push, so the start settles the record (as a memory
  tool's sync does), and the change is an edit of the pushed copy.
* Within a session the agent may have read the file before the push: a copy that lacks
  the pushed lines and adds its own at the end is as likely the pushed block with a line
  changed as an old copy plus an entry. Merged from the copy before the push, the append
  rule is off: a conflict, the agent's copy kept aside, never both blocks stored.

Real database and directories through ``SyncService``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.results import Outcome, SyncResult
from memstrata.sandbox.rule import Merge, Preserve, SyncBase, decide
from memstrata.sandbox.state import CONFLICT_DIR
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

MEMORY_MD = FileKind.MEMORY.filename
DOG = "- Has a dog named Rex"
CAT = "- Has a cat named Rex"
SEED = "\n- one\n- two\n- three\n"


def memory(store: MemoryStore) -> tuple[str, int]:
    found = store.get_memory_file(USER, FileKind.MEMORY)
    assert found is not None
    return found.content, found.version


def result_for(results: list[SyncResult]) -> SyncResult:
    return next(r for r in results if r.filename == MEMORY_MD)


async def add(sync: SyncService, store: MemoryStore, lines: str) -> None:
    content, version = memory(store)
    await sync.frontend_edit(USER, "memory", content + lines, expected_version=version)


def shell_replace(file: Path, old: str, new: str) -> None:
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new))


async def kept_aside(provider: LocalSandboxProvider, session_id: str | None) -> list[str]:
    box = provider.for_user(USER, session_id)
    return [
        text
        for path in await box.list(f"{CONFLICT_DIR}/")
        if (text := await box.read_text(path)) is not None
    ]


@pytest.mark.parametrize("same_process", [True, False], ids=["this process", "the server"])
async def test_a_session_started_after_the_push_edits_the_pushed_line(
    same_process: bool, sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    await sync.provision_user(USER)
    person = sync if same_process else SyncService(store, provider)
    await add(person, store, DOG + "\n")  # pushed into the user's sandbox by either
    await sync.start_session(USER)  # the next day's session
    tracker = await sync.begin_round(USER)
    shell_replace(provider.directory_for(USER) / MEMORY_MD, DOG, CAT)
    tracker.on_tool_call("edit_file", {"path": MEMORY_MD})

    result = result_for(await sync.end_round(tracker))

    content, version = memory(store)
    assert (result.outcome, version) == (Outcome.WRITTEN, 3)
    assert (CAT in content, DOG in content) == (True, False)


async def test_the_next_session_start_reads_it_back_as_an_edit_too(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    await sync.provision_user(USER)
    await add(sync, store, DOG + "\n")
    await sync.start_session(USER)
    shell_replace(provider.directory_for(USER) / MEMORY_MD, DOG, CAT)  # no round end

    result = result_for(await sync.start_session(USER))

    content, _ = memory(store)
    assert result.outcome is Outcome.WRITTEN
    assert (CAT in content, DOG in content) == (True, False)


@pytest.mark.parametrize(
    ("old", "new"),
    [("- two\n", "- two (agent fixed)\n"), ("- three\n", "- three (agent fixed)\n")],
    ids=["a middle line", "the last line"],
)
@pytest.mark.parametrize("session_id", [None, "S"], ids=["user sandbox", "session sandbox"])
async def test_a_pushed_line_changed_within_the_session_is_never_stored_twice(
    session_id: str | None,
    old: str,
    new: str,
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    await sync.start_session(USER, session_id)
    tracker = await sync.begin_round(USER, session_id)
    await add(sync, store, SEED)  # pushed into the open session's sandbox
    shell_replace(provider.directory_for(USER, session_id) / MEMORY_MD, old, new)
    tracker.on_tool_call("write_file", {"path": MEMORY_MD})

    result = result_for(await sync.end_round(tracker))

    content, version = memory(store)
    assert (result.outcome, version, content.count("- one")) == (Outcome.CONFLICT, 2, 1)
    assert [new in copy for copy in await kept_aside(provider, session_id)] == [True]


# -- the rule ---------------------------------------------------------------------------------

BEFORE = "# Memory\n- a\n"
PUSHED = SyncBase(2, BEFORE + "- Likes tea\n", (BEFORE,))


@pytest.mark.parametrize(
    ("row", "sandbox", "expected"),
    [
        (
            "the pushed line changed (or an old copy plus a line): kept aside",
            BEFORE + "- Likes green tea\n",
            Preserve(),
        ),
        (
            "an old copy with a line above the push's: merged, as before",
            "# Memory\n- agent\n- a\n",
            Merge("# Memory\n- agent\n- a\n- Likes tea\n", 2),
        ),
        (
            "the pushed copy plus a line: its own appends merge, as before",
            BEFORE + "- Likes tea\n- Owns a cat\n",
            Merge(BEFORE + "- Likes tea\n- Is vegan\n- Owns a cat\n", 3),
        ),
    ],
)
def test_merged_from_the_copy_before_a_push_two_appends_conflict(
    row: str, sandbox: str, expected: object
) -> None:
    db = SyncBase(3, PUSHED.content + "- Is vegan\n") if "own appends" in row else PUSHED
    assert decide(sandbox, db, PUSHED) == expected, row
