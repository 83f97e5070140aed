"""A memory-file PUT cut off by ``memstrata serve``'s shutdown: once its write is under way
it still reaches the user's sandbox and still sends the NOTIFY that drops the user's
cached agents in other processes.

The write commits on a worker thread that the cancel at the end of the grace does not
stop; the mirror and the NOTIFY after it ran in the request's task, which that cancel
ended, so the DB held the new copy while the sandbox and other processes kept the old
one. Two real server processes' worth of faults: the embedding call of the write is slow
(the cut-off lands before the commit, which happens anyway), or the sandbox's USER.md is
a FIFO that blocks the mirror until the test writes to it (the cut-off lands after the
commit). This test process listens with a real AgentPool on the same PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import stat
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
from memstrata.sandbox.local import safe_dir_name
from tests.agent.recorder import Recorder
from tests.cli.test_shutdown_grace import Served, serving, token_headers
from tests.retrieval.fault_server import FaultServer

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
    headers = {**token_headers(user), "If-Match": f'"{version}"'}
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(
            httpx.put, served.url + USER_FILE, json={"content": NEW}, headers=headers, timeout=30
        )
        assert cut.wait(timeout=20), "the write never reached the point to cut it off at"
        served.process.send_signal(signal.SIGTERM)
        return answer.result(timeout=30).status_code


def _provision(served: Served, user: str) -> tuple[str, int]:
    read = httpx.get(served.url + USER_FILE, headers=token_headers(user), timeout=30)
    assert read.status_code == 200, read.text
    return read.json()["content"], read.json()["version"]


def test_an_edit_cut_off_after_its_commit_still_mirrors_and_notifies(
    tmp_path: Path, pg_url: str, fake: FaultServer, db: Database, heard: Recorder
) -> None:
    with serving(tmp_path, pg_url, fake, grace_s=1) as served:
        old, version = _provision(served, "eve")
        sandbox = _sandbox_file(tmp_path, "eve")
        sandbox.unlink()
        os.mkfifo(sandbox)  # the mirror's read of it blocks until this test writes to it
        committed = threading.Event()

        def watch_commit() -> None:
            while _stored(db, "eve") != (NEW, version + 1):
                time.sleep(0.05)
            committed.set()

        threading.Thread(target=watch_commit, daemon=True).start()
        status = _put_then_sigterm(served, "eve", version, committed)
        assert status == 503, served.stderr()
        with sandbox.open("w") as fifo:  # the blocked read gets the copy the sandbox had
            fifo.write(old)

        assert served.process.wait(timeout=30) == 0, served.stderr()
        assert heard.wait_for("eve", timeout_s=10), "no invalidation" + served.stderr()
        assert stat.S_ISREG(sandbox.stat().st_mode), "the sandbox never got the new copy"
        assert sandbox.read_text() == NEW
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
