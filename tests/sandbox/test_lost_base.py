"""A sandbox copy memstrata wrote is never taken for an agent edit, whatever write failed.

Found by fault injection on a nearly full sandbox: provisioning wrote USER.md but not its
base record, a frontend edit's push then failed, and the next MCP tool call (a fresh
tracker) read the old template back as an edit — over the human's version. A push now
records its base before the file (naming the copy it replaces, ``previous``) and writes
no file whose record failed. Real directories and the real database; the only fake is a
sandbox wrapper whose writes fail while the "disk" is full.
"""

from __future__ import annotations

import json

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.state import base_path
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER, FaultyProvider

pytestmark = pytest.mark.anyio

USER_MD = FileKind.USER.filename
RECORD = base_path(USER_MD)
ALLERGY = "- Allergy: PENICILLIN"


class Disk:
    """The sandboxes on a disk that fills up, and the sync service writing to them: which
    writes fail with "No space left on device" is ``full``, a predicate on the path
    (``None``: the disk has room)."""

    def __init__(self, store: MemoryStore, provider: LocalSandboxProvider) -> None:
        self.full: str | None = None  # "all", "records" or "files"
        self.provider = FaultyProvider(
            provider, error=OSError(28, "No space left on device"), fail=self.fails
        )
        self.sync = SyncService(store, self.provider)

    def fails(self, path: str, op: str) -> bool:
        if op != "write" or self.full is None:
            return False
        if self.full == "records":
            return path.startswith(".memstrata/")
        if self.full == "files":
            return not path.startswith(".memstrata/")
        return True


@pytest.fixture
def disk(store: MemoryStore, provider: LocalSandboxProvider) -> Disk:
    return Disk(store, provider)


def stored(store: MemoryStore) -> tuple[str, int]:
    file = store.get_memory_file(USER, FileKind.USER)
    assert file is not None
    return file.content, file.version


async def human_edit(sync: SyncService, store: MemoryStore) -> str:
    """The frontend adds the allergy line (version 2), whatever the sandbox push does."""
    content, version = stored(store)
    edited = content + ALLERGY + "\n"
    file = await sync.frontend_edit(USER, "user", edited, version)
    assert file.version == version + 1
    return edited


async def mcp_update_user(disk: Disk) -> str:
    """An MCP ``update_user`` call: a fresh tracker with no base of its own."""
    tools = MemoryTools(ToolContext.bind(USER, disk.sync, disk.provider.for_user(USER)))
    return await tools.call(
        "update_user", {"section": "Profile", "key": "Diet", "content": "vegetarian"}
    )


def assert_kept(store: MemoryStore, *more: str) -> None:
    content, _ = stored(store)
    assert ALLERGY in content
    for line in more:
        assert line in content


async def test_the_reviewers_scenario_a_provisioned_copy_without_its_record(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    disk.full = "records"  # room for USER.md, none for its base record
    await sync.provision_user(USER)
    disk.full = "all"
    await human_edit(sync, store)  # 200, version 2; its push fails
    disk.full = None

    answer = await mcp_update_user(disk)

    assert not answer.startswith("error"), answer
    assert_kept(store, "Diet: vegetarian")
    assert await user_box.read_text(USER_MD) == stored(store)[0]


async def test_the_reviewers_scenario_read_back_without_a_tracker(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    disk.full = "records"
    await sync.provision_user(USER)
    disk.full = "all"
    edited = await human_edit(sync, store)
    disk.full = None

    result = await sync.after_controlled_write(USER, USER_MD)

    assert result.outcome in {Outcome.RESTORED, Outcome.PUSHED}
    assert stored(store) == (edited, 2)
    assert await user_box.read_text(USER_MD) == edited


async def test_a_push_whose_record_fails_writes_no_file(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    await sync.provision_user(USER)
    template, _ = stored(store)
    disk.full = "records"  # the file would fit, its record not

    await human_edit(sync, store)

    assert await user_box.read_text(USER_MD) == template  # the old copy, with its old record
    assert json.loads(await user_box.read_text(RECORD) or "")["version"] == 1
    disk.full = None
    assert (await mcp_update_user(disk)).startswith("Set Diet")
    assert_kept(store, "Diet: vegetarian")
    assert stored(store)[1] == 3  # the human's version 2, then the tool's write


async def test_a_record_written_ahead_of_a_failed_file_write(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    await sync.provision_user(USER)
    template, _ = stored(store)
    disk.full = "files"  # the record fits, the file not

    await human_edit(sync, store)

    assert await user_box.read_text(USER_MD) == template
    record = json.loads(await user_box.read_text(RECORD) or "")
    assert (record["version"], record["previous"]) == (2, template)
    disk.full = None
    assert (await mcp_update_user(disk)).startswith("Set Diet")
    assert_kept(store, "Diet: vegetarian")


async def test_both_writes_failing_leave_a_lagging_copy(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    await sync.provision_user(USER)
    disk.full = "all"
    edited = await human_edit(sync, store)
    disk.full = None

    result = await sync.after_controlled_write(USER, USER_MD)

    assert result.outcome is Outcome.PUSHED
    assert stored(store) == (edited, 2)


async def test_the_state_a_failed_push_leaves_is_read_as_lagging(
    store: MemoryStore, sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    # What a push recorded ahead of its failed file write leaves, written directly: the old
    # copy in the sandbox, a record of the new version naming it as ``previous``.
    await sync.provision_user(USER)
    template, _ = stored(store)
    edited = template + ALLERGY + "\n"
    store.upsert_memory_file(USER, FileKind.USER, edited, 1)  # another process: version 2
    record = {"version": 2, "content": edited, "previous": template}
    await user_box.write_text(RECORD, json.dumps(record))

    result = await sync.after_controlled_write(USER, USER_MD)

    assert result.outcome is Outcome.RESTORED or result.outcome is Outcome.PUSHED
    assert stored(store) == (edited, 2)
    assert await user_box.read_text(USER_MD) == edited
    # The record still names the replaced copy, until the sandbox's next write-back: an
    # agent may still be working from it.
    assert json.loads(await user_box.read_text(RECORD) or "")["previous"] == template


async def test_an_agent_edit_of_the_stale_copy_is_merged_not_written_over(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    await sync.provision_user(USER)
    template, _ = stored(store)
    disk.full = "files"
    await human_edit(sync, store)
    disk.full = None
    # A shell edit of the copy the failed push left: an agent edit, to be kept.
    await user_box.write_text(USER_MD, "- Timezone: CET\n" + template)

    result = await sync.after_controlled_write(USER, USER_MD)

    assert result.outcome is Outcome.MERGED
    assert_kept(store, "- Timezone: CET")


async def test_an_agent_edit_is_still_written_back(
    store: MemoryStore, disk: Disk, user_box: LocalDirectorySandbox
) -> None:
    sync = disk.sync
    await sync.provision_user(USER)
    template, _ = stored(store)
    assert "previous" not in json.loads(await user_box.read_text(RECORD) or "")
    await user_box.write_text(USER_MD, template + "- Pet: Rex\n")

    result = await sync.after_controlled_write(USER, USER_MD)

    assert result.outcome is Outcome.WRITTEN
    assert stored(store) == (template + "- Pet: Rex\n", 2)


async def test_a_record_of_an_earlier_release_reads_as_before(
    store: MemoryStore, sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    await sync.provision_user(USER)
    template, _ = stored(store)
    await user_box.write_text(RECORD, json.dumps({"version": 1, "content": template}))
    await user_box.write_text(USER_MD, template + "- Pet: Rex\n")

    result = await sync.after_controlled_write(USER, USER_MD)

    assert result.outcome is Outcome.WRITTEN
    assert stored(store) == (template + "- Pet: Rex\n", 2)
