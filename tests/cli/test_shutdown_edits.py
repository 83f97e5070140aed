"""A memory-file PUT cut off by ``memstrata serve``'s shutdown: once its write is under way
it still reaches the user's sandbox and still sends the NOTIFY that drops the user's
cached agents in other processes.

The write commits on a worker thread that the cancel at the end of the grace does not
stop; the mirror and the NOTIFY after it ran in the request's task, which that cancel
ended, so the DB held the new copy while the sandbox and other processes kept the old
one. Two real server processes' worth of faults: the embedding call of the write is slow
(the cut-off lands before the commit, which happens anyway), or the mirror's read of the
sandbox's USER.md is held up by the test (the cut-off lands after the commit). This test
process listens with a real AgentPool on the same PostgreSQL.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from memstrata.agent.pool import AgentPool
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.sandbox.dir_names import safe_dir_name
from tests.agent.recorder import Recorder
from tests.api.auth import signed
from tests.cli.test_shutdown_grace import SECRET, serving
from tests.retrieval.fault_server import FaultServer
from tests.served import Served

pytestmark = pytest.mark.timeout(90)

USER_FILE = "/api/config/agent-files/user"
NEW = "# User\n\n- Paddles a sea kayak on Sundays\n"


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


@pytest.fixture
def heard(db: Database) -> Iterator[Recorder]:
    heard = Recorder()
    pool: AgentPool[object] = AgentPool(db.engine, on_invalidate=heard)
    assert pool.start(timeout_s=30), "the test's pool must listen before the server writes"
    yield heard
    pool.close()


def _sandbox_file(tmp_path: Path, user: str) -> Path:
    return tmp_path / "data" / "sandboxes" / safe_dir_name(user) / "USER.md"


def _stored(db: Database, user: str) -> tuple[str, int] | None:
    with db.engine.connect() as conn:
        row = conn.execute(
            text("SELECT content, version FROM user_memory WHERE user_id = :u AND file_type = :t"),
            {"u": user, "t": FileKind.USER.file_type},
        ).one_or_none()
    return None if row is None else (row[0], row[1])


def _put_then_sigterm(served: Served, user: str, version: int, cut: threading.Event) -> int:
    """PUT USER.md on ``version``; SIGTERM once ``cut`` is set; the PUT's status."""
    headers = {**signed(user, SECRET), "If-Match": f'"{version}"'}
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(
            httpx.put, served.url + USER_FILE, json={"content": NEW}, headers=headers, timeout=30
        )
        assert cut.wait(timeout=20), "the write never reached the point to cut it off at"
        served.process.send_signal(signal.SIGTERM)
        return answer.result(timeout=30).status_code


def _provision(served: Served, user: str) -> tuple[str, int]:
    read = httpx.get(served.url + USER_FILE, headers=signed(user, SECRET), timeout=30)
    assert read.status_code == 200, read.text
    return read.json()["content"], read.json()["version"]


# Put on the server's PYTHONPATH: its sandbox reads of USER.md wait while the gate file
# exists. (A FIFO as USER.md used to block the read; the sandbox now refuses FIFOs.)
_READ_GATE = """
import os, time
from memstrata.sandbox import local

_read = local.LocalDirectorySandbox._read_text

def _gated(self, path):
    while path == "USER.md" and os.path.exists(os.environ["TEST_SANDBOX_READ_GATE"]):
        time.sleep(0.02)
    return _read(self, path)

local.LocalDirectorySandbox._read_text = _gated
"""


def test_an_edit_cut_off_after_its_commit_still_mirrors_and_notifies(
    tmp_path: Path,
    pg_url: str,
    fake: FaultServer,
    db: Database,
    heard: Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inject, gate = tmp_path / "inject", tmp_path / "read-gate"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(_READ_GATE)
    monkeypatch.setenv("PYTHONPATH", str(inject))
    monkeypatch.setenv("TEST_SANDBOX_READ_GATE", str(gate))
    with serving(tmp_path, pg_url, fake, grace_s=1) as served:
        _, version = _provision(served, "eve")
        sandbox = _sandbox_file(tmp_path, "eve")
        gate.touch()  # the mirror's read of USER.md waits until this test removes it
        committed = threading.Event()

        def watch_commit() -> None:
            while _stored(db, "eve") != (NEW, version + 1):
                time.sleep(0.05)
            committed.set()

        threading.Thread(target=watch_commit, daemon=True).start()
        status = _put_then_sigterm(served, "eve", version, committed)
        assert status == 503, served.stderr()
        gate.unlink()  # the blocked read goes on, after the cut-off

        assert served.process.wait(timeout=30) == 0, served.stderr()
        assert heard.wait_for("eve", timeout_s=10), "no invalidation" + served.stderr()
        assert sandbox.read_text() == NEW, "the sandbox never got the new copy"
        assert served.events("shutdown.writes_abandoned") == []


def test_an_edit_cut_off_while_embedding_still_mirrors_and_notifies(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database, heard: Recorder
) -> None:
    with serving(tmp_path, pg_url, fake, grace_s=1) as served:
        _, version = _provision(served, "fay")
        embedding = threading.Event()
        asked = len(fake.requests)
        fake.delay_s = 3.0  # per text: the write's one chunk embeds for 3 s, the grace is 1 s
        fake.mode = "slow"

        def watch_embedding() -> None:
            while len(fake.requests) == asked:
                time.sleep(0.02)
            embedding.set()

        threading.Thread(target=watch_embedding, daemon=True).start()
        status = _put_then_sigterm(served, "fay", version, embedding)
        assert status == 503, served.stderr()

        assert served.process.wait(timeout=30) == 0, served.stderr()
        assert _stored(db, "fay") == (NEW, version + 1)
        assert heard.wait_for("fay", timeout_s=10), "no invalidation" + served.stderr()
        assert _sandbox_file(tmp_path, "fay").read_text() == NEW
