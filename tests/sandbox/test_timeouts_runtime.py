"""A host's hanging sandbox through the whole library: ``Memstrata.open`` wraps it once, and a
frontend edit and the agent's next tool call answer within the deadline.

Real PostgreSQL, real directories behind the hanging link of ``tests.sandbox.slow``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.timed import TimedSandboxProvider, with_deadline
from tests.sandbox.slow import Link, RemoteProvider
from tests.sandbox.support import USER, sync_events

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.5
SLACK_S = 1.5


@pytest.fixture
def link() -> Link:
    return Link()


@pytest.fixture
def remote(tmp_path: Path, link: Link) -> RemoteProvider:
    return RemoteProvider(LocalSandboxProvider(tmp_path / "remote"), link)


@pytest.fixture
def mem(settings: Settings, db: Database, remote: RemoteProvider) -> Iterator[Memstrata]:
    timed = settings.model_copy(update={"sandbox_timeout_s": TIMEOUT_S})
    runtime = Memstrata.open(timed, database=db, sandboxes=remote, embedder=None)
    yield runtime
    runtime.close()  # the pool only; the session database stays up


def test_open_wraps_every_provider_once(
    settings: Settings, db: Database, remote: RemoteProvider, open_runtime: Callable[..., Memstrata]
) -> None:
    hosts = Memstrata.open(settings, database=db, sandboxes=remote, embedder=None)
    default = open_runtime()
    wrapped = with_deadline(remote, 1.0)
    again = Memstrata.open(settings, database=db, sandboxes=wrapped, embedder=None)
    try:
        assert isinstance(hosts.sandboxes, TimedSandboxProvider)
        assert hosts.sandboxes.inner is remote
        assert hosts.sandboxes.timeout_s == settings.sandbox_timeout_s == 5.0
        assert isinstance(default.sandboxes, TimedSandboxProvider)
        assert isinstance(default.sandboxes.inner, LocalSandboxProvider)
        assert default.sandboxes.inner.root == settings.resolved_sandbox_root
        assert again.sandboxes is wrapped and wrapped.inner is remote  # not wrapped twice
        assert hosts.sync.sandboxes is hosts.sandboxes  # sync sees the same deadline
    finally:
        for runtime in (hosts, again):  # ``default`` is the fixture's to close
            runtime.pool.close()


async def test_a_frontend_edit_answers_while_the_sandbox_hangs(
    mem: Memstrata, remote: RemoteProvider, link: Link, caplog: pytest.LogCaptureFixture
) -> None:
    session = await mem.open_agent_session(USER, token_limit=8000)
    before = mem.store.get_memory_file(USER, FileKind.USER)
    assert before is not None
    link.hang_writes()

    started = time.monotonic()
    with anyio.fail_after(TIMEOUT_S + SLACK_S):
        edited = await mem.sync.frontend_edit(
            USER, "user", before.content + "- likes tea\n", expected_version=before.version
        )
    took = time.monotonic() - started

    assert TIMEOUT_S - 0.05 <= took < TIMEOUT_S + SLACK_S
    stored = mem.store.get_memory_file(USER, FileKind.USER)
    assert stored is not None and stored.version == edited.version == before.version + 1
    assert "likes tea" in stored.content
    # This edit's push (a session start's pushes, or another test's, may be logged too)
    [push] = [
        e
        for e in sync_events(caplog)
        if e["direction"] == "db->sandbox"
        and e.get("scenario") == "frontend"
        and e.get("user_id") == USER
    ]
    assert push["result"] == "sandbox_failed" and push["file"] == "USER.md"
    assert "did not finish within 0.5 s" in push["detail"]
    assert await mem.sync.settle(0.1) == 0  # nothing left for a shutdown to wait for

    # The mirror no longer holds the user's lock: the agent's next call answers, and the
    # memory lands in the DB although the sandbox still cannot be written.
    started = time.monotonic()
    with anyio.fail_after(TIMEOUT_S + SLACK_S):
        reply = await session.tools.call("record_memory", {"content": "Ada's cat is Pixel"})
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    memory = mem.store.get_memory_file(USER, FileKind.MEMORY)
    assert memory is not None and "Ada's cat is Pixel" in memory.content, reply
    assert "Pixel" not in (await remote.local.for_user(USER).read_text("MEMORY.md") or "")
