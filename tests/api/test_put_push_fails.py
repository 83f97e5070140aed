"""A PUT answered 200 whose sandbox file write failed keeps its version at the next session
start (docs/RELIABILITY.md, the failure table).

The second PUT since the sandbox's last write-back: its base record is written, its
MEMORY.md write fails — an immutable file (``chattr +i``, real, where the test may set it)
or a sandbox wrapper whose MEMORY.md writes raise. The user's deletion is acknowledged
(200) and must stay: the next session start pushes the DB copy instead of writing the
first PUT's copy, left in the file, back over it. Real app (httpx against the router),
real PostgreSQL, real directories.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.local import LocalSandboxProvider
from tests.api.auth import AuthHeader
from tests.api.mounted import mounted
from tests.sandbox.support import FaultyProvider

pytestmark = pytest.mark.anyio

MEMORY_FILE = "/memory/api/config/agent-files/memory"
X = "- X: likes tea\n"
Y = "- Y: home address is 1 Secret Road\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Failure:
    """Makes the sandbox's MEMORY.md unwritable while ``failing()`` is entered."""

    def __init__(self, how: str, root: Path) -> None:
        self.how = how
        self.local = LocalSandboxProvider(root)
        self.on = False
        self.provider: SandboxProvider = self.local
        if how == "raising":
            self.provider = FaultyProvider(
                self.local,
                error=OSError(5, "Input/output error"),
                fail=lambda path, op: self.on and op == "write" and path == "MEMORY.md",
            )
        elif shutil.which("chattr") is None:
            pytest.skip("no chattr here")

    @contextmanager
    def failing(self, user: str) -> Iterator[None]:
        target = self.local.directory_for(user) / "MEMORY.md"
        if self.how == "immutable":
            done = subprocess.run(["chattr", "+i", str(target)], capture_output=True, text=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a file immutable here: {done.stderr.strip()}")
        self.on = True
        try:
            yield
        finally:
            self.on = False
            if self.how == "immutable":
                subprocess.run(["chattr", "-i", str(target)], check=True)


@pytest.fixture(params=["raising", "immutable"])
def failure(request: pytest.FixtureRequest, tmp_path: Path) -> Failure:
    return Failure(request.param, tmp_path / "sandboxes")


@pytest.fixture
async def host(
    settings: Settings, db: Database, failure: Failure
) -> AsyncIterator[tuple[Memstrata, httpx.AsyncClient]]:
    mem = Memstrata.open(settings, database=db, sandboxes=failure.provider, embedder=None)
    async with mounted(mem) as client:
        yield mem, client


async def put(
    client: httpx.AsyncClient, headers: dict[str, str], etag: str, content: str
) -> httpx.Response:
    answer = await client.put(
        MEMORY_FILE, headers={**headers, "If-Match": etag}, json={"content": content}
    )
    assert answer.status_code == 200, answer.text
    return answer


async def test_an_acknowledged_deletion_survives_a_failed_sandbox_write(
    host: tuple[Memstrata, httpx.AsyncClient],
    failure: Failure,
    auth: AuthHeader,
) -> None:
    mem, client = host
    headers = auth("alice")
    first = await client.get(MEMORY_FILE, headers=headers)  # provisions: v1, the template
    assert first.status_code == 200
    template = first.json()["content"]
    added = await put(client, headers, first.headers["etag"], template + X + Y)  # v2, mirrored
    box = failure.local.directory_for("alice")
    assert (box / "MEMORY.md").read_text() == template + X + Y

    with failure.failing("alice"):
        deleted = await put(client, headers, added.headers["etag"], template + X)  # v3: 200
    assert deleted.json()["version"] == 3
    assert (box / "MEMORY.md").read_text() == template + X + Y  # the write did not land

    session = await mem.open_agent_session("alice", token_limit=50_000)
    session.close()

    stored = mem.store.get_memory_file("alice", FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (template + X, 3)
    after = await client.get(MEMORY_FILE, headers=headers)
    assert (after.json()["version"], after.json()["content"]) == (3, template + X)
    assert (box / "MEMORY.md").read_text() == template + X
    assert not list(box.glob(".memstrata/conflicts/*"))
