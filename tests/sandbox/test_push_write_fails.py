"""A push whose file write does not land, the second since the sandbox's last write-back.

A push writes its base record first and the file second. When the file write fails (a
full disk, an immutable file, a host's sandbox failing) or the process dies between the
two, the file still holds the copy the push was replacing — on a second push with no
write-back between, the first push's copy. The record must name that copy, or the next
session start reads it as an agent edit and writes it back over the newer DB version: a
user's acknowledged deletion comes back. Pure tests of the record and the rule, then the
real sync over a real database and real directories, with a sandbox wrapper whose
MEMORY.md writes fail (the state a kill between the two writes leaves is the same).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.push import records
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.rule import (
    Action,
    Merge,
    Nothing,
    Push,
    SyncBase,
    WriteBack,
    decide,
    edited_from,
)
from memstrata.sandbox.state import base_path, read_base, write_base
from memstrata.sandbox.sync import SyncService
from tests.sandbox.push_copies import MEMORY_MD, V1, V2, V3, file, stored
from tests.sandbox.support import USER, FaultyProvider

RECORD = base_path(MEMORY_MD)

# The reviewer's copies (V1 to V3: push_copies.py), and a fourth adding a fact.
V4 = V3 + "- W: walks at dawn\n"
AGENT = "- Z: agent note (at the top)\n"


# -- the records a push writes (pure) -----------------------------------------------------


@pytest.mark.parametrize(
    ("row", "pushed", "replacing", "base", "ahead", "landed"),
    [
        (
            "first push since a write-back: the copy it replaces",
            file(2, V2),
            V1,
            SyncBase(1, V1),
            SyncBase(2, V2, (V1,)),
            SyncBase(2, V2, (V1,)),
        ),
        (
            "second push: every copy since the write-back, also once it lands",
            file(3, V3),
            V2,
            SyncBase(2, V2, (V1,)),
            SyncBase(3, V3, (V1, V2)),
            SyncBase(3, V3, (V1, V2)),
        ),
        (
            "second push over a first that failed: the file holds the oldest copy",
            file(3, V3),
            V1,
            SyncBase(2, V2, (V1,)),
            SyncBase(3, V3, (V1, V2)),
            SyncBase(3, V3, (V1, V2)),
        ),
        (
            "third push over a second that failed: the file holds the second's copy",
            file(4, V4),
            V2,
            SyncBase(3, V3, (V1, V2)),
            SyncBase(4, V4, (V1, V2, V3)),
            SyncBase(4, V4, (V1, V2, V3)),
        ),
        (
            "a push back to the oldest copy: the copies since, but the pushed one",
            file(3, V1),
            V2,
            SyncBase(2, V2, (V1,)),
            SyncBase(3, V1, (V2,)),
            SyncBase(3, V1, (V2,)),
        ),
        (
            "over an agent edit (settled by the caller): that copy alone",
            file(3, V3),
            AGENT + V2,
            SyncBase(2, V2, (V1,)),
            SyncBase(3, V3, (AGENT + V2,)),
            SyncBase(3, V3, (AGENT + V2,)),
        ),
        ("over a blank file: none", file(2, V2), " \n", None, SyncBase(2, V2), SyncBase(2, V2)),
        ("over no file: none", file(2, V2), None, None, SyncBase(2, V2), SyncBase(2, V2)),
    ],
)
def test_the_records_of_a_push(
    row: str,
    pushed: MemoryFile,
    replacing: str | None,
    base: SyncBase | None,
    ahead: SyncBase,
    landed: SyncBase,
) -> None:
    assert records(pushed, replacing, base) == (ahead, landed), row


copies = st.sampled_from([V1, V2, V3, V4, AGENT + V2, ""])


@given(copies, copies, st.one_of(st.none(), copies), st.one_of(st.none(), copies), copies)
def test_the_record_ahead_names_every_copy_the_file_may_hold(
    content: str, replacing: str, previous: str | None, also: str | None, pushed: str
) -> None:
    """Whatever the base, a sandbox left holding the copy the push replaced (the write did
    not land) or the pushed copy (it did) is never read as an edit: the DB copy is pushed
    or already there."""
    base = SyncBase(2, content, tuple(c for c in (previous, also) if c is not None))
    ahead, landed = records(file(3, pushed), replacing, base)
    db = SyncBase(3, pushed)
    assert isinstance(decide(replacing, db, ahead), Push | Nothing)
    assert isinstance(decide(pushed, db, ahead), Push | Nothing)
    assert isinstance(decide(pushed, db, landed), Push | Nothing)


# -- the rule over a record that names the file's copy (pure) ------------------------------

AHEAD = SyncBase(3, V3, (V1, V2))


@pytest.mark.parametrize(
    ("row", "sandbox", "expected"),
    [
        ("the file write did not land: it lags", V2, Push()),
        ("the oldest copy lags too", V1, Push()),
        ("the pushed copy", V3, Nothing()),
        (
            "an edit of the oldest copy: merged from it, X and the deletion kept",
            AGENT + V1,
            Merge(AGENT + V3, 3),
        ),
        (
            "an edit of the copy the file held: merged from it, the deletion kept",
            AGENT + V2,
            Merge(AGENT + V3, 3),
        ),
        (
            "an edit of the pushed copy: written at its version",
            AGENT + V3,
            WriteBack(AGENT + V3, 3),
        ),
    ],
)
def test_the_rule_under_a_record_written_ahead_of_the_file(
    row: str, sandbox: str, expected: Action
) -> None:
    assert decide(sandbox, SyncBase(3, V3), AHEAD) == expected, row


@pytest.mark.parametrize(
    ("sandbox", "origin"),
    [(AGENT + V1, V1), (AGENT + V2, V2), (AGENT + V3, V3), (V2.replace("\n", "\r\n"), V2)],
)
def test_an_edit_is_merged_from_the_newest_copy_whose_changes_it_holds(
    sandbox: str, origin: str
) -> None:
    assert edited_from(sandbox, AHEAD) == origin
    # With ``previous`` alone the rule is as before: the pushed copy or ``previous``.
    assert edited_from(sandbox, SyncBase(3, V3, (V1,))) == (V1 if origin == V1 else V3)


# -- the record on disk ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_record_keeps_the_copy_the_file_holds(user_box: LocalDirectorySandbox) -> None:
    await write_base(user_box, MEMORY_MD, AHEAD)
    raw = json.loads(await user_box.read_text(RECORD) or "")
    assert raw == {"version": 3, "content": V3, "previous": V1, "replacing": V2}
    assert await read_base(user_box, MEMORY_MD) == AHEAD
    raw["replacing"] = 7  # not text: read as absent, like a malformed ``previous``
    await user_box.write_text(RECORD, json.dumps(raw))
    assert await read_base(user_box, MEMORY_MD) == SyncBase(3, V3, (V1,))


# -- the real sync: the reviewer's reproduction, without the kill ---------------------------


class FailingMemory:
    """A provider whose MEMORY.md file writes fail while ``failing`` is set (the record
    under ``.memstrata/`` is still written, as when only the file write does not land)."""

    def __init__(self, provider: LocalSandboxProvider) -> None:
        self.failing = False
        self.provider = FaultyProvider(
            provider, error=OSError(1, "Operation not permitted"), fail=self.fails
        )

    def fails(self, path: str, op: str) -> bool:
        return self.failing and op == "write" and path == MEMORY_MD


async def two_pushes_the_second_failing(
    store: MemoryStore, provider: LocalSandboxProvider
) -> tuple[SyncService, FailingMemory]:
    """Provisioning pushes the template (V1, version 1), the user adds X and Y (V2, v2,
    pushed), then deletes Y (V3, v3, acknowledged) while the sandbox's MEMORY.md cannot be
    written."""
    disk = FailingMemory(provider)
    sync = SyncService(store, disk.provider)
    store.upsert_memory_file(USER, FileKind.MEMORY, V1, 0)
    await sync.start_session(USER)
    await sync.frontend_edit(USER, "memory", V2, 1)
    disk.failing = True
    acknowledged = await sync.frontend_edit(USER, "memory", V3, 2)
    disk.failing = False
    assert (acknowledged.content, acknowledged.version) == (V3, 3)
    return sync, disk


@pytest.mark.anyio
async def test_a_session_start_after_a_failed_second_push_pushes_the_db_copy(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    sync, _ = await two_pushes_the_second_failing(store, provider)
    assert await user_box.read_text(MEMORY_MD) == V2  # the first push's copy, left
    assert await read_base(user_box, MEMORY_MD) == AHEAD  # naming it

    results = await sync.start_session(USER)

    memory = next(r for r in results if r.filename == MEMORY_MD)
    assert (memory.outcome, memory.version) == (Outcome.PUSHED, 3)
    assert stored(store) == (V3, 3)  # the deletion stands: Y is not written back
    assert await user_box.read_text(MEMORY_MD) == V3
    # Landed now: the record names the copies since the write-back, as after any push.
    assert await read_base(user_box, MEMORY_MD) == SyncBase(3, V3, (V1, V2))


@pytest.mark.anyio
async def test_an_agent_edit_of_the_copy_left_keeps_the_deletion(
    store: MemoryStore, provider: LocalSandboxProvider, user_box: LocalDirectorySandbox
) -> None:
    sync, _ = await two_pushes_the_second_failing(store, provider)
    # The agent edits the copy it finds (V2, with Y) and the session reads it back.
    await user_box.write_text(MEMORY_MD, AGENT + V2)

    results = await sync.start_session(USER)

    memory = next(r for r in results if r.filename == MEMORY_MD)
    assert (memory.outcome, memory.version) == (Outcome.MERGED, 4)
    assert stored(store) == (AGENT + V3, 4)
    left = await user_box.read_text(MEMORY_MD)
    assert left is not None and "Secret Road" not in left


@pytest.mark.anyio
async def test_a_second_push_that_lands_leaves_the_usual_record(
    store: MemoryStore, sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    store.upsert_memory_file(USER, FileKind.MEMORY, V1, 0)
    await sync.start_session(USER)
    await sync.frontend_edit(USER, "memory", V2, 1)
    await sync.frontend_edit(USER, "memory", V3, 2)

    assert await user_box.read_text(MEMORY_MD) == V3
    assert await read_base(user_box, MEMORY_MD) == SyncBase(3, V3, (V1, V2))
