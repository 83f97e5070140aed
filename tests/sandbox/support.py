"""Fixtures and helpers shared by the sync, dirty-tracking and agent-tool tests.

Everything runs against the real embedded PostgreSQL (``db`` / ``store`` from the root
conftest), real directories under ``tmp_path`` and the real retrieval ``Indexer``. The only
fakes are fault injectors: a sandbox wrapper that fails on chosen operations, and a store
pointed at a port where no PostgreSQL listens.
"""

from __future__ import annotations

import builtins
import logging
import socket
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from memstrata.agent.pool import AgentPool
from memstrata.agent.session import open_agent_session
from memstrata.db.database import Database
from memstrata.db.engine import make_session_factory
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.staging import StagedIndex
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncResult, SyncService

USER = "user-1"
# The three read-backs of a session's sandbox (``read_back_via``).
READ_BACKS = ["round end", "session read-back", "session start"]


def by_file(results: list[SyncResult]) -> dict[str, SyncResult]:
    return {r.filename: r for r in results}


async def read_back_via(sync: SyncService, via: str) -> dict[str, SyncResult]:
    """The results of reading session ``s1``'s sandbox back ``via`` one of ``READ_BACKS``,
    by file: a round end after a ``write_file`` of MEMORY.md, the read-back of the closed
    session, or its next start."""
    if via == "round end":
        session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
        session.on_tool_call("write_file", {"path": "MEMORY.md", "content": "x"})
        results = by_file(await session.end_round())
        session.close()
        return results
    if via == "session read-back":
        sync.end_session(USER, "s1")
        return by_file(await sync.read_back_session(USER, "s1"))
    return by_file(await sync.start_session(USER, "s1"))


class RecordingIndexer:
    """The real Indexer staging a memory file's rows, with a log of calls (and an optional
    hook before each); staging runs before the write's transaction."""

    def __init__(self, inner: Indexer) -> None:
        self.inner = inner
        self.calls: list[tuple[str, FileKind, str]] = []
        self.before: Callable[[str, FileKind, str], None] | None = None

    def stage_memory_file(
        self, user_id: str, kind: FileKind, content: str, *, embed: bool = True
    ) -> StagedIndex:
        if self.before is not None:
            self.before(user_id, kind, content)
        self.calls.append((user_id, kind, content))
        return self.inner.stage_memory_file(user_id, kind, content, embed=embed)

    def template_paragraphs(self, kind: FileKind) -> Collection[str] | None:
        return self.inner.template_paragraphs(kind)


class FaultySandbox:
    """Wraps a real sandbox; ``fail(path, op)`` decides whether an operation raises.

    ``after_read[path]`` runs once, after a successful ``read_text`` of ``path`` (to
    interleave another writer between a read-back's sandbox read and its DB write).
    """

    def __init__(
        self,
        inner: LocalDirectorySandbox,
        error: BaseException | None = None,
        fail: Callable[[str, str], bool] = lambda path, op: True,
    ) -> None:
        self.inner = inner
        self.error = error
        self.fail = fail
        self.case_sensitive = inner.case_sensitive
        self.after_read: dict[str, Callable[[], Awaitable[None]]] = {}

    def _check(self, path: str, op: str) -> None:
        if self.error is not None and self.fail(path, op):
            raise self.error

    async def read_text(self, path: str) -> str | None:
        self._check(path, "read")
        value = await self.inner.read_text(path)
        hook = self.after_read.pop(path, None)
        if hook is not None:
            await hook()
        return value

    async def write_text(self, path: str, content: str) -> None:
        self._check(path, "write")
        await self.inner.write_text(path, content)

    async def exists(self, path: str) -> bool:
        self._check(path, "exists")
        return await self.inner.exists(path)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        self._check(prefix, "list")
        return await self.inner.list(prefix)

    async def delete(self, path: str) -> None:
        self._check(path, "delete")
        await self.inner.delete(path)


class FaultyProvider:
    """Hands out ``FaultySandbox`` wrappers (or raises) over a real provider."""

    def __init__(self, inner: LocalSandboxProvider, **faults: Any) -> None:
        self.inner = inner
        self.faults = faults
        self.raise_on_for_user: BaseException | None = None
        self.handed_out: list[FaultySandbox] = []

    def for_user(self, user_id: str, session_id: str | None = None) -> Sandbox:
        if self.raise_on_for_user is not None:
            raise self.raise_on_for_user
        sandbox = FaultySandbox(self.inner.for_user(user_id, session_id), **self.faults)
        self.handed_out.append(sandbox)
        return sandbox


def read_only_state(provider: LocalSandboxProvider) -> FaultyProvider:
    """Sandboxes whose ``.memstrata/`` cannot be written: no base records, no conflict
    copies (reads work, and find nothing)."""
    return FaultyProvider(
        provider,
        error=PermissionError(13, "Permission denied"),
        fail=lambda path, op: path.startswith(".memstrata/") and op != "read",
    )


class HookedStore(MemoryStore):
    """The real store; ``before_upsert`` runs before each write (another writer racing it),
    and ``fail_get_after`` makes reads fail after that many calls (the DB going away)."""

    def __init__(self, db: Database, templates: TemplateSet) -> None:
        super().__init__(db.sessions, templates)
        self.before_upsert: Callable[[], None] | None = None
        self.fail_get_after: int | None = None
        self.gets = 0

    def get_memory_file(self, user_id: str, kind: str | FileKind) -> Any:
        self.gets += 1
        if self.fail_get_after is not None and self.gets > self.fail_get_after:
            raise OperationalError("SELECT", {}, ConnectionRefusedError("db went away"))
        return super().get_memory_file(user_id, kind)

    def upsert_memory_file(self, *args: Any, **kwargs: Any) -> Any:
        if self.before_upsert is not None:
            self.before_upsert()
        return super().upsert_memory_file(*args, **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unreachable_store(templates: TemplateSet) -> MemoryStore:
    """A store whose database refuses connections: every call raises OperationalError."""
    engine = create_engine(
        f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none",
        connect_args={"connect_timeout": 2},
    )
    return MemoryStore(make_session_factory(engine), templates)


def embedding_rows(db: Database, user_id: str) -> list[tuple[str | None, int | None, str]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT file_path, chunk_index, chunk_text FROM memory_embeddings "
                "WHERE user_id = :u ORDER BY file_path, chunk_index"
            ),
            {"u": user_id},
        )
        return [(r[0], r[1], r[2]) for r in rows]


def sync_events(caplog: pytest.LogCaptureFixture, event: str = "sync.file") -> list[dict[str, Any]]:
    found = [event_fields(r) for r in caplog.records]
    return [f for f in found if f.get("event") == event]


def warning_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [event_fields(r) for r in caplog.records if r.levelno >= logging.WARNING]


# -- fixtures (imported into the conftests of tests/sandbox and tests/agent) --------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def sandbox_root(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


@pytest.fixture
def provider(sandbox_root: Path) -> LocalSandboxProvider:
    return LocalSandboxProvider(sandbox_root)


@pytest.fixture
def indexer(db: Database) -> RecordingIndexer:
    return RecordingIndexer(Indexer(db.sessions))


@pytest.fixture
def invalidated() -> list[str]:
    return []


@pytest.fixture
def pool(invalidated: list[str]) -> AgentPool[object]:
    return AgentPool(on_invalidate=invalidated.append)


@pytest.fixture
def sync(
    db: Database,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    indexer: RecordingIndexer,
    pool: AgentPool[object],
) -> SyncService:
    return SyncService(indexed_store(db, templates, indexer), provider, pool=pool)


def indexed_store(db: Database, templates: TemplateSet, indexer: RecordingIndexer) -> MemoryStore:
    """The real store, writing search rows through ``indexer`` (the ``store`` fixture has none)."""
    return MemoryStore(db.sessions, templates, indexer=indexer)


@pytest.fixture
def user_box(provider: LocalSandboxProvider) -> LocalDirectorySandbox:
    return provider.for_user(USER)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="memstrata")
    return caplog
