"""What ``Memstrata`` checks at its entry, before anything runs: the user id of each call
(a bad one never reaches the sandbox provider, so it logs nothing at WARNING) and the types
of ``Memstrata.open``'s arguments (a ``TypeError`` naming the argument, not an
``AttributeError`` deep inside, nor a runtime whose every sync fails).

Before, a 101-character or control-character user id logged ``sync.sandbox_unavailable``
twice at WARNING, then raised ``InvalidUserIdError``; ``Memstrata.open("x")`` raised
``AttributeError: 'str' object has no attribute ...``; ``Memstrata.open(sandboxes=object())``
opened, and every sync then failed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import InvalidUserIdError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.retrieval.rounds import Round
from memstrata.runtime import Memstrata
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.local import LocalSandboxProvider

BAD_IDS = ["a" * 101, "bad\x07id", "a\u202eb", "", " bob"]


def _calls(mem: Memstrata) -> dict[str, Callable[[str], object]]:
    """Each facade call that takes a user id, with good other arguments."""
    return {
        "open_agent_session": lambda u: asyncio.run(mem.open_agent_session(u, token_limit=8000)),
        "open_agent_session(session_id)": lambda u: asyncio.run(
            mem.open_agent_session(u, token_limit=8000, session_id="chat-1")
        ),
        "import_rounds": lambda u: mem.import_rounds(u, [Round("s", 0, "I like green tea")]),
        "reindex_memory_files": mem.reindex_memory_files,
        "sandbox_directory": mem.sandbox_directory,
        "holds_user": mem.holds_user,
    }


@pytest.mark.parametrize("user_id", BAD_IDS, ids=["101 chars", "BEL", "RLO", "empty", "space"])
def test_a_bad_user_id_is_refused_at_the_entry_and_logs_nothing_loud(
    open_runtime: Callable[..., Memstrata],
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
    user_id: str,
) -> None:
    mem = open_runtime()
    for name, call in _calls(mem).items():
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="memstrata"), pytest.raises(InvalidUserIdError):
            call(user_id)
        loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert loud == [], name
    root = settings.resolved_sandbox_root
    assert not root.exists() or list(root.iterdir()) == []


# -- Memstrata.open's argument types --------------------------------------------------------


class HostProvider:
    def __init__(self, root: Path) -> None:
        self.local = LocalSandboxProvider(root)

    def for_user(self, user_id: str, session_id: str | None = None) -> Sandbox:
        return self.local.for_user(user_id, session_id)


class NotCallable:
    for_user = "not a method"


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        (
            {"settings": "x"},
            "Memstrata.open: settings must be a memstrata.config.Settings, got str 'x'",
        ),
        (
            {"database": "postgresql://x"},
            "Memstrata.open: database must be a memstrata.db.database.Database (from "
            "Database.open(settings)) or None, got str 'postgresql://x'",
        ),
        (
            {"sandboxes": object()},
            "Memstrata.open: sandboxes must be a sandbox provider, an object with a method "
            "for_user(user_id, session_id=None) returning a Sandbox "
            "(memstrata.sandbox.base.SandboxProvider), or None; got object, which has no "
            "for_user",
        ),
        (
            {"sandboxes": NotCallable()},
            "Memstrata.open: sandboxes must be a sandbox provider, an object with a method "
            "for_user(user_id, session_id=None) returning a Sandbox "
            "(memstrata.sandbox.base.SandboxProvider), or None; got NotCallable, whose "
            "for_user is a str, not a method",
        ),
        (
            {"embedder": "e5"},
            "Memstrata.open: embedder must be an embedding provider, an object with a name "
            "and a method embed(texts, kind) (memstrata.retrieval.embeddings."
            "EmbeddingProvider), or None for BM25-only search; got str, which has no embed",
        ),
        (
            {"skill_loader": [Path("skills")]},
            "Memstrata.open: skill_loader must be a memstrata.skills.loader.SkillLoader or "
            "None, got list",
        ),
    ],
    ids=["settings", "database", "sandboxes", "for_user not callable", "embedder", "skills"],
)
def test_a_wrong_argument_to_open_is_a_type_error_naming_it(
    db: Database, settings: Settings, kwargs: dict[str, Any], said: str
) -> None:
    arguments: dict[str, Any] = {"database": db, **kwargs}
    given = arguments.pop("settings", settings)
    with pytest.raises(TypeError) as info:
        Memstrata.open(given, **arguments)
    assert str(info.value) == said


def test_open_without_a_database_checks_before_starting_one(tmp_path: Path) -> None:
    """The check comes first: no embedded PostgreSQL is started for a call that fails."""
    settings = Settings(environment="test", data_dir=tmp_path / "data")
    with pytest.raises(TypeError, match="sandboxes must be a sandbox provider"):
        Memstrata.open(settings, sandboxes=object())
    assert not (tmp_path / "data").exists()


def test_a_host_provider_without_the_optional_hooks_is_taken(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    with Memstrata.open(settings, database=db, sandboxes=HostProvider(tmp_path)) as mem:
        session = asyncio.run(mem.open_agent_session("host-user", token_limit=8000))
        session.close()
    assert (tmp_path / "host-user" / "USER.md").exists()


# -- sync.read_file takes the names the library documents ------------------------------------


def test_read_file_by_name_waits_for_a_write_in_flight_as_by_kind(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """``read_file(user, "user")`` is the same read as ``read_file(user, FileKind.USER)``:
    an If-Match write of the file under way is waited for. Before, the name missed the
    write's claim (held under the kind) and returned the version the write replaced."""
    mem = open_runtime()
    user = "reader"
    mem.store.provision_default_files(user)
    base = mem.store.get_memory_file(user, FileKind.USER)
    assert base is not None
    entered, opened = threading.Event(), threading.Event()
    upsert = mem.sync.db.upsert

    async def held(u: str, kind: FileKind, content: str, expected: int | None) -> MemoryFile:
        entered.set()
        await asyncio.to_thread(opened.wait, 10)
        return await upsert(u, kind, content, expected)

    mem.sync.db.upsert = held  # type: ignore[method-assign,assignment]

    async def scenario() -> tuple[MemoryFile, bool]:
        write = asyncio.create_task(
            mem.sync.frontend_edit(user, "user", "# USER\n- new", expected_version=base.version)
        )
        await asyncio.to_thread(entered.wait, 10)
        read = asyncio.create_task(mem.sync.read_file(user, "user"))
        await asyncio.sleep(0.2)
        opened.set()
        await write
        return await read

    file, provisioned = asyncio.run(scenario())
    assert (file.version, file.content, provisioned) == (base.version + 1, "# USER\n- new", False)
