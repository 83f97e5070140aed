"""A host app mounting the REST router, with its own sandboxes that hang: the PUT that has
committed its DB write answers within the sandbox deadline (spec §5, docs/RELIABILITY.md).

The app runs in the test's event loop (httpx's ASGI transport), so the test bounds the
wait itself; real PostgreSQL, real directories behind the hanging link.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.local import LocalSandboxProvider
from tests.api.auth import AuthHeader
from tests.api.mounted import mounted
from tests.sandbox.slow import Link, RemoteProvider

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.5
SLACK_S = 1.5
USER_FILE = "/memory/api/config/agent-files/user"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def link() -> Link:
    return Link()


@pytest.fixture
async def host(
    settings: Settings, db: Database, tmp_path: Path, link: Link
) -> AsyncIterator[tuple[Memstrata, httpx.AsyncClient]]:
    remote = RemoteProvider(LocalSandboxProvider(tmp_path / "remote"), link)
    timed = settings.model_copy(update={"sandbox_timeout_s": TIMEOUT_S})
    mem = Memstrata.open(timed, database=db, sandboxes=remote, embedder=None)
    async with mounted(mem) as client:
        yield mem, client


async def test_a_put_answers_while_the_hosts_sandbox_hangs(
    host: tuple[Memstrata, httpx.AsyncClient],
    link: Link,
    auth: AuthHeader,
) -> None:
    mem, client = host
    first = await client.get(USER_FILE, headers=auth("ada"))  # provisions, sandbox healthy
    assert first.status_code == 200
    link.hang_all()

    started = time.monotonic()
    with anyio.fail_after(TIMEOUT_S + SLACK_S):
        put = await client.put(
            USER_FILE,
            headers={**auth("ada"), "If-Match": first.headers["etag"]},
            json={"content": first.json()["content"] + "- prefers tea\n"},
        )
    took = time.monotonic() - started

    assert put.status_code == 200, put.text
    assert put.json()["version"] == first.json()["version"] + 1
    assert TIMEOUT_S - 0.05 <= took < TIMEOUT_S + SLACK_S
    stored = mem.store.get_memory_file("ada", FileKind.USER)
    assert stored is not None and "prefers tea" in stored.content
    assert await mem.sync.settle(0.1) == 0

    # The next edit finds the sandbox just timed out and does not wait for it again.
    started = time.monotonic()
    with anyio.fail_after(SLACK_S):
        again = await client.put(
            USER_FILE,
            headers={**auth("ada"), "If-Match": put.headers["etag"]},
            json={"content": stored.content + "- and biscuits\n"},
        )
    assert again.status_code == 200, again.text
    assert time.monotonic() - started < TIMEOUT_S
