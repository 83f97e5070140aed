"""An agent that removes or garbles ``.memstrata/`` never gets its copy written over a newer
DB version.

The base records live in files the agent can write: ``rm -rf .memstrata``, a removed
``.memstrata/base`` or a record full of junk left a read-back with no base, and the plain
sandbox-first rule then stored the agent's copy over a person's later edit (found by a
drill: a person's line added over REST, the session closed, its read-back reported
``written`` and the line was gone, with no copy kept). memstrata now knows which DB
version it last left each sandbox file at; without a record it can trust, an agent copy is
written only over that version, and kept aside (a conflict) when the DB holds a newer one.

For a provider that names its sandboxes (``identity()``: the local one's root) the version
lives in PostgreSQL (``sandbox_synced``), so a service that never synced the file itself —
another process, or this one restarted — knows it too.

Real database and directories. ``person`` is a second ``SyncService`` on the same store
and sandboxes: another process (the HTTP server), which does not push into the session
sandboxes this one opened.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.results import Outcome, SyncResult
from memstrata.sandbox.rule import Preserve, SyncBase, WriteBack, decide
from memstrata.sandbox.state import CONFLICT_DIR, base_path
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

MEMORY_MD = FileKind.MEMORY.filename
HUMAN = "- human: chose plan B"
AGENT = "- agent appended"


def remove_state(box: Path) -> None:
    shutil.rmtree(box / ".memstrata")


def remove_records(box: Path) -> None:
    shutil.rmtree(box / ".memstrata" / "base")


def junk_record(box: Path) -> None:
    (box / base_path(MEMORY_MD)).write_text("{not json")


def far_version(box: Path) -> None:
    record = box / base_path(MEMORY_MD)
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "version": 99}))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "rm -rf .memstrata": remove_state,
    "rm -rf .memstrata/base": remove_records,
    "junk in the record": junk_record,
    "a version no push wrote": far_version,
}


def memory(store: MemoryStore) -> tuple[str, int]:
    found = store.get_memory_file(USER, FileKind.MEMORY)
    assert found is not None
    return found.content, found.version


def result_for(results: list[SyncResult]) -> SyncResult:
    return next(r for r in results if r.filename == MEMORY_MD)


async def kept_aside(provider: LocalSandboxProvider, session_id: str | None) -> list[str]:
    box = provider.for_user(USER, session_id)
    return [
        text
        for path in await box.list(f"{CONFLICT_DIR}/")
        if (text := await box.read_text(path)) is not None
    ]


async def damaged_session(
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
    damage: Callable[[Path], None],
    *,
    person_edits: bool,
) -> Path:
    """Session S open; maybe a person's line saved by another process (version 2); the
    agent damages the session's ``.memstrata`` and appends a line by shell; S closed."""
    await sync.start_session(USER, "S")
    if person_edits:
        person = SyncService(store, provider)
        content, version = memory(store)
        edited = content + HUMAN + "\n"
        await person.frontend_edit(USER, "memory", edited, expected_version=version)
    box = provider.directory_for(USER, "S")
    damage(box)
    file = box / MEMORY_MD
    file.write_text(file.read_text() + AGENT + "\n")
    sync.end_session(USER, "S")
    return box


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_a_read_back_keeps_the_agent_copy_aside_over_a_newer_version(
    damage: Callable[[Path], None],
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    box = await damaged_session(sync, store, provider, damage, person_edits=True)

    result = result_for(await sync.read_back_session(USER, "S"))

    assert result.outcome is Outcome.CONFLICT
    content, version = memory(store)
    assert (HUMAN in content, AGENT in content, version) == (True, False, 2)
    assert [AGENT in copy for copy in await kept_aside(provider, "S")] == [True]
    assert (box / MEMORY_MD).read_text() == content  # the DB copy pushed over it


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_the_next_session_start_keeps_it_aside_too(
    damage: Callable[[Path], None],
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    await damaged_session(sync, store, provider, damage, person_edits=True)

    await sync.start_session(USER, "T")  # reads closed S back first

    content, version = memory(store)
    assert (HUMAN in content, AGENT in content, version) == (True, False, 2)
    assert [AGENT in copy for copy in await kept_aside(provider, "S")] == [True]


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_with_nothing_newer_the_agent_copy_is_written(
    damage: Callable[[Path], None],
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    """The DB still holds the version the session started with: nothing newer to lose."""
    await damaged_session(sync, store, provider, damage, person_edits=False)

    result = result_for(await sync.read_back_session(USER, "S"))

    assert result.outcome is Outcome.WRITTEN
    content, version = memory(store)
    assert (AGENT in content, version) == (True, 2)
    assert await kept_aside(provider, "S") == []


async def test_a_frontend_push_over_a_sandbox_without_records_merges_from_the_copy_before(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    """The user's own sandbox, records removed, the agent's line appended: the frontend
    edit's push merges from the DB copy its edit replaced (the server's own record)."""
    await sync.provision_user(USER)
    box = provider.directory_for(USER)
    remove_state(box)
    (box / MEMORY_MD).write_text((box / MEMORY_MD).read_text() + AGENT + "\n")
    content, version = memory(store)

    await sync.frontend_edit(USER, "memory", content + HUMAN + "\n", expected_version=version)

    merged, _ = memory(store)
    assert (HUMAN in merged, AGENT in merged) == (True, True)
    assert (box / MEMORY_MD).read_text() == merged


async def test_the_round_end_still_merges_from_its_round_start_snapshot(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    """A tracker's snapshot is the server's own record: both lines are kept, as before."""
    await sync.start_session(USER, "S")
    tracker = await sync.begin_round(USER, "S")
    person = SyncService(store, provider)
    content, version = memory(store)
    await person.frontend_edit(USER, "memory", content + HUMAN + "\n", expected_version=version)
    box = provider.directory_for(USER, "S")
    remove_state(box)
    (box / MEMORY_MD).write_text(content + AGENT + "\n")
    tracker.on_tool_call("write_file", {"path": MEMORY_MD})

    result = result_for(await sync.end_round(tracker))

    assert result.outcome is Outcome.MERGED
    merged, _ = memory(store)
    assert (HUMAN in merged, AGENT in merged) == (True, True)


# -- another process, or a restart: the version is in the database ---------------------------


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
async def test_another_service_reads_back_with_the_version_the_first_one_left(
    damage: Callable[[Path], None],
    sync: SyncService,
    store: MemoryStore,
    provider: LocalSandboxProvider,
) -> None:
    """The drill's set-up: the session started by one process, the person's line saved by
    a second, the read-back done by a third (the agent host's library, or the first one
    restarted), which synced nothing itself."""
    box = await damaged_session(sync, store, provider, damage, person_edits=True)
    restarted = SyncService(store, provider)

    result = result_for(await restarted.read_back_session(USER, "S"))

    assert result.outcome is Outcome.CONFLICT
    content, version = memory(store)
    assert (HUMAN in content, AGENT in content, version) == (True, False, 2)
    assert [AGENT in copy for copy in await kept_aside(provider, "S")] == [True]
    assert (box / MEMORY_MD).read_text() == content


async def test_a_version_another_service_pushed_is_the_one_written_over(
    store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    """The agent host provisions the user's sandbox (version 1); the server pushes a
    person's edit into it (version 2); the agent removes the records and appends to the
    copy it now holds: that copy was pushed from version 2, so the host's read-back writes
    it — it knows the server's push, not only its own version 1."""
    host, server = SyncService(store, provider), SyncService(store, provider)
    await host.provision_user(USER)
    content, version = memory(store)
    await server.frontend_edit(USER, "memory", content + HUMAN + "\n", expected_version=version)
    box = provider.directory_for(USER)
    remove_state(box)
    (box / MEMORY_MD).write_text((box / MEMORY_MD).read_text() + AGENT + "\n")

    result = result_for(await host.start_session(USER))

    assert result.outcome is Outcome.WRITTEN
    content, version = memory(store)
    assert (HUMAN in content, AGENT in content, version) == (True, True, 3)
    assert await kept_aside(provider, None) == []


# -- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "db_version", "authoritative", "expected"),
    [
        ("the DB still at the version pushed: written", 3, False, WriteBack("edit\n", 3)),
        ("a newer DB version: kept aside", 4, False, Preserve),
        ("a frontend edit being pushed: kept aside", 4, True, Preserve),
        ("a DB version below the one pushed (a recreated user): kept aside", 2, False, Preserve),
    ],
)
def test_without_a_base_the_version_pushed_decides(
    row: str, db_version: int, authoritative: bool, expected: object
) -> None:
    db = SyncBase(db_version, "db\n")
    action = decide("edit\n", db, None, db_authoritative=authoritative, pushed=3)
    if expected is Preserve:
        assert isinstance(action, Preserve) and action.reason, row
    else:
        assert action == expected, row


def test_without_the_fact_the_plain_sandbox_first_rule_stays() -> None:
    assert decide("edit\n", SyncBase(7, "db\n"), None) == WriteBack("edit\n", 7)
