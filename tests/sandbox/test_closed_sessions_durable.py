"""A closed session's last round is read back by the user's next session start in any
process: after a restart, on another replica sharing the sandbox root, or after the
process that had it open died.

"Another process" is a new ``SyncService`` over the same database and sandbox root with a
provider of its own (no state shared but the files and the kernel's locks), and once a
real child process killed while its session is open. Real database, real directories.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox import sessions as sessions_module
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sessions import MARK_DIR, mark_path
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

MEMORY_MD = FileKind.MEMORY.filename
NOTE = "- SHELL-NOTE (echo >> MEMORY.md in the last round)\n"


def another_process(store: MemoryStore, root: Path) -> tuple[SyncService, LocalSandboxProvider]:
    provider = LocalSandboxProvider(root)
    return SyncService(store, provider), provider


def stored(store: MemoryStore) -> str:
    found = store.get_memory_file(USER, FileKind.MEMORY)
    assert found is not None
    return found.content


def shell_append(provider: LocalSandboxProvider, session_id: str, line: str = NOTE) -> None:
    with (provider.directory_for(USER, session_id) / MEMORY_MD).open("a") as shell:
        shell.write(line)


def marks(provider: LocalSandboxProvider) -> list[str]:
    directory = provider.directory_for(USER) / MARK_DIR
    return sorted(p.name for p in directory.glob("*.json")) if directory.is_dir() else []


async def test_a_session_closed_before_a_restart_is_read_back_by_the_next_process(
    store: MemoryStore, sandbox_root: Path
) -> None:
    first, provider = another_process(store, sandbox_root)
    await first.start_session(USER, "conv-1")
    shell_append(provider, "conv-1")
    first.end_session(USER, "conv-1")
    assert marks(provider) == ["conv-1.json"]
    del first  # the process ends: its in-memory list of closed sessions is gone

    restarted, _ = another_process(store, sandbox_root)
    await restarted.start_session(USER, "conv-2")

    assert NOTE in stored(store)
    assert NOTE in (provider.directory_for(USER, "conv-2") / MEMORY_MD).read_text()
    assert marks(provider) == ["conv-2.json"]  # conv-1's went once read back


async def test_a_session_still_open_elsewhere_is_not_read_back(
    store: MemoryStore, sandbox_root: Path
) -> None:
    host, provider = another_process(store, sandbox_root)
    await host.start_session(USER, "conv-1")
    shell_append(provider, "conv-1")  # the agent is still at work: never closed

    replica, _ = another_process(store, sandbox_root)
    await replica.start_session(USER, "conv-2")
    assert NOTE not in stored(store)
    assert "conv-1.json" in marks(provider)

    host.end_session(USER, "conv-1")  # now closed: the next start anywhere reads it back
    await replica.start_session(USER, "conv-3")
    assert NOTE in stored(store)
    assert "conv-1.json" not in marks(provider)


async def test_a_session_reopened_in_another_process_is_not_read_back(
    store: MemoryStore, sandbox_root: Path
) -> None:
    first, provider = another_process(store, sandbox_root)
    await first.start_session(USER, "conv-1")
    second, _ = another_process(store, sandbox_root)
    await second.start_session(USER, "conv-1")  # the same conversation on another replica
    first.end_session(USER, "conv-1")
    shell_append(provider, "conv-1")  # the second's agent is at work in it

    await first.start_session(USER, "conv-2")  # first's own list says conv-1 closed
    assert NOTE not in stored(store)

    second.end_session(USER, "conv-1")
    await first.start_session(USER, "conv-3")
    assert NOTE in stored(store)


async def test_a_session_whose_process_died_while_it_was_open_is_read_back(
    store: MemoryStore, sandbox_root: Path, pg_url: str, tmp_path: Path
) -> None:
    child = textwrap.dedent(
        f"""
        import asyncio, os, sys
        from pathlib import Path
        from memstrata.config import Settings
        from memstrata.db.database import Database
        from memstrata.memory.store import MemoryStore
        from memstrata.memory.templates import TemplateSet, default_template_dir
        from memstrata.sandbox.local import LocalSandboxProvider
        from memstrata.sandbox.sync import SyncService

        settings = Settings(environment="test", database_url={pg_url!r},
                            data_dir=Path({str(tmp_path / "child")!r}))
        store = MemoryStore(Database.open(settings).sessions, TemplateSet(default_template_dir()))
        provider = LocalSandboxProvider(Path({str(sandbox_root)!r}))
        asyncio.run(SyncService(store, provider).start_session({USER!r}, "conv-1"))
        with (provider.directory_for({USER!r}, "conv-1") / "MEMORY.md").open("a") as shell:
            shell.write({NOTE!r})
        os._exit(0)  # killed, in effect: no close, no clean-up
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120)

    replica, provider = another_process(store, sandbox_root)
    await replica.start_session(USER, "conv-2")

    assert NOTE in stored(store)
    assert "conv-1.json" not in marks(provider)


async def test_a_mark_whose_session_sandbox_is_gone_is_dropped_without_recreating_it(
    store: MemoryStore, sandbox_root: Path
) -> None:
    first, provider = another_process(store, sandbox_root)
    await first.start_session(USER, "conv-1")
    first.end_session(USER, "conv-1")
    conv_1 = provider.directory_for(USER, "conv-1")
    for path in sorted(conv_1.rglob("*"), reverse=True):  # the host cleans the session up
        path.rmdir() if path.is_dir() else path.unlink()
    conv_1.rmdir()

    restarted, _ = another_process(store, sandbox_root)
    await restarted.start_session(USER)

    assert not conv_1.exists()
    assert marks(provider) == []


async def test_a_start_reads_back_a_bounded_number_of_closed_sessions(
    store: MemoryStore, sandbox_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions_module, "MAX_READ_BACKS_PER_START", 2)
    first, provider = another_process(store, sandbox_root)
    for n in range(3):
        await first.start_session(USER, f"conv-{n}")
        shell_append(provider, f"conv-{n}", f"- NOTE {n}\n")
    for n in range(3):
        first.end_session(USER, f"conv-{n}")
    del first

    restarted, _ = another_process(store, sandbox_root)
    await restarted.start_session(USER)
    assert sum(f"- NOTE {n}\n" in stored(store) for n in range(3)) == 2
    assert len(marks(provider)) == 1  # the third waits for the next start
    await restarted.start_session(USER)
    assert all(f"- NOTE {n}\n" in stored(store) for n in range(3))
    assert marks(provider) == []


async def test_a_mark_naming_another_session_than_its_file_is_removed(
    store: MemoryStore, sandbox_root: Path
) -> None:
    sync, provider = another_process(store, sandbox_root)
    await sync.start_session(USER)
    planted = provider.directory_for(USER) / mark_path("conv-9")
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text('{"session_id": "../../other-user"}')

    await sync.start_session(USER)

    assert marks(provider) == []
