"""``/api/memory/conflicts`` when the sandbox fails or hangs: spec 5's sandbox failure (a
warning, the main flow answers), never a 500 and never a wait past the sandbox deadline.

A host app mounts the router over its own sandboxes (real directories behind a link that
can hang, or a provider that fails); real PostgreSQL. The app runs in the test's event
loop (httpx's ASGI transport), so the test bounds the waits itself.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

import anyio
import httpx
import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.conflicts import list_copies
from memstrata.runtime import Memstrata
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.state import CONFLICT_DIR
from tests.api.auth import AuthHeader
from tests.api.mounted import mounted
from tests.sandbox.slow import Link, RemoteProvider
from tests.sandbox.support import FaultyProvider

pytestmark = pytest.mark.anyio

TIMEOUT_S = 0.5
SLACK_S = 1.5
LIST = "/memory/api/memory/conflicts"
OLDER = "MEMORY.md.20260301T120000.000000Z.md"
NEWER = "USER.md.20260302T120000.000000Z.md"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def local(tmp_path: Path) -> LocalSandboxProvider:
    return LocalSandboxProvider(tmp_path / "sandboxes")


@asynccontextmanager
async def serving(
    settings: Settings, db: Database, provider: SandboxProvider
) -> AsyncIterator[httpx.AsyncClient]:
    timed = settings.model_copy(update={"sandbox_timeout_s": TIMEOUT_S})
    mem = Memstrata.open(timed, database=db, sandboxes=provider, embedder=None)
    async with mounted(mem) as client:
        yield client


def plant(local: LocalSandboxProvider, user: str, *names: str) -> Path:
    directory = local.directory_for(user) / CONFLICT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text(f"the agent's {name}\n")
    return directory


async def test_a_hanging_sandbox_is_sandbox_failed_within_its_deadline(
    settings: Settings, db: Database, local: LocalSandboxProvider, auth: AuthHeader
) -> None:
    directory = plant(local, "ada", OLDER)
    link = Link()
    async with serving(settings, db, RemoteProvider(local, link)) as client:
        link.hang_all()
        started = time.monotonic()
        with anyio.fail_after(TIMEOUT_S + SLACK_S):
            listed = await client.get(LIST, headers=auth("ada"))
        took = time.monotonic() - started
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert (body["sandbox"], body["total"], body["conflicts"]) == ("sandbox_failed", None, [])
        assert body["warnings"] == [
            "the sandbox could not be listed (SandboxError): kept-aside copies cannot be "
            "shown; try again later"
        ]
        assert TIMEOUT_S - 0.05 <= took < TIMEOUT_S + SLACK_S

        # The sandbox timed out a moment ago: these fail at once, without a call.
        with anyio.fail_after(SLACK_S):
            read = await client.get(f"{LIST}/{OLDER}", headers=auth("ada"))
            dismissed = await client.delete(f"{LIST}/{OLDER}", headers=auth("ada"))
        for response in (read, dismissed):
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "sandbox_unavailable"
            assert response.headers["retry-after"] == "1"
        assert "try again later" in dismissed.json()["message"]
        assert (directory / OLDER).exists()

        link.heal()
        await anyio.sleep(TIMEOUT_S + 0.1)  # the timed-out sandbox is tried again after that
        healed = (await client.get(LIST, headers=auth("ada"))).json()
        assert (healed["sandbox"], healed["total"]) == ("ok", 1)


async def test_a_copy_that_cannot_be_read_is_listed_without_its_text(
    settings: Settings, db: Database, local: LocalSandboxProvider, auth: AuthHeader
) -> None:
    plant(local, "ada", OLDER, NEWER)
    link = Link(hang=lambda operation, path: operation == "read_text" and path.endswith(OLDER))
    async with serving(settings, db, RemoteProvider(local, link)) as client:
        with anyio.fail_after(TIMEOUT_S + SLACK_S):
            listed = await client.get(LIST, headers=auth("ada"))
    assert listed.status_code == 200, listed.text
    body = listed.json()
    summary = [(c["name"], c["size_bytes"], c["preview"]) for c in body["conflicts"]]
    assert summary == [
        (NEWER, len(f"the agent's {NEWER}\n"), f"the agent's {NEWER}"),
        (OLDER, None, None),
    ]
    assert (body["sandbox"], body["total"]) == ("sandbox_failed", 2)
    assert body["warnings"] == ["1 of the copies could not be read (SandboxError); try again later"]


@pytest.mark.parametrize("failure", ["a file where the directory is", "the provider raises"])
async def test_a_failing_sandbox_is_sandbox_failed_never_a_500(
    settings: Settings,
    db: Database,
    local: LocalSandboxProvider,
    auth: AuthHeader,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    provider: SandboxProvider = local
    if failure == "the provider raises":
        faulty = FaultyProvider(local)
        faulty.raise_on_for_user = OSError(5, f"Input/output error on {local.root}")
        provider = faulty
    else:
        local.root.mkdir(parents=True)
        local.directory_for("ada").write_text("not a directory")
    caplog.set_level(logging.WARNING, logger="memstrata.memory.conflicts")
    async with serving(settings, db, provider) as client:
        listed = await client.get(LIST, headers=auth("ada"))
        read = await client.get(f"{LIST}/{OLDER}", headers=auth("ada"))
        dismissed = await client.delete(f"{LIST}/{OLDER}", headers=auth("ada"))
        bad_name = await client.get(f"{LIST}/{quote('../x', safe='')}", headers=auth("ada"))

    assert listed.status_code == 200, listed.text
    assert (listed.json()["sandbox"], listed.json()["total"]) == ("sandbox_failed", None)
    assert read.status_code == 503
    assert read.json()["code"] == "sandbox_unavailable"
    # The local sandbox's exists() finds no file under a file: nothing to dismiss.
    assert dismissed.status_code == (404 if failure.startswith("a file") else 503)
    assert bad_name.status_code == 400  # the name is checked before the sandbox is asked
    for response in (listed, read, dismissed):
        # what failed, by kind; where (the host's paths) is for the log only
        assert str(local.root) not in response.text
    failed = [
        event_fields(r) for r in caplog.records if r.getMessage() == "conflicts.sandbox_failed"
    ]
    operations = ["list", "read"] + ([] if failure.startswith("a file") else ["delete"])
    assert [f["operation"] for f in failed] == operations
    assert all(f["user_id"] == "ada" and str(local.root) in f["error"] for f in failed), failed


class _ListThenDismiss(LocalDirectorySandbox):
    """The user dismisses a copy (in another tab) right after the listing read the names."""

    def __init__(self, root: Path, gone: Path) -> None:
        super().__init__(root)
        self.gone = gone

    async def list(self, prefix: str = "") -> builtins.list[str]:
        found = await super().list(prefix)
        self.gone.unlink(missing_ok=True)
        return found


class _Provider:
    def __init__(self, local: LocalSandboxProvider, gone: Path) -> None:
        self.local = local
        self.gone = gone

    def for_user(self, user_id: str, session_id: str | None = None) -> _ListThenDismiss:
        return _ListThenDismiss(self.local.directory_for(user_id, session_id), self.gone)


async def test_a_copy_dismissed_between_the_listing_and_its_read_is_left_out(
    local: LocalSandboxProvider,
) -> None:
    directory = plant(local, "ada", OLDER, NEWER)
    page = await list_copies(_Provider(local, directory / OLDER), "ada")
    assert [s.copy.name for s in page.copies] == [NEWER]
    assert (page.total, page.sandbox, page.warnings) == (1, "ok", [])
