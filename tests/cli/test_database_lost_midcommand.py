"""A database that fails while a command runs is one ``error:`` line and exit status 1,
not a traceback: the CLI as a real process, on a PostgreSQL server of the test's own that
is stopped (``pg_ctl -m fast stop``) while ``memstrata reindex`` embeds, or that holds a
lock ``memstrata search`` waits for longer than its ``lock_timeout``. Each printed a
120-560-line traceback ending in OperationalError / LockNotAvailable. And the bad inputs
around them: a database URL that is not a URL, ``db status`` on a server without pgvector.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.local_server import MODEL_NAME, LocalEmbeddingServer
from tests.db.conftest import ScratchFactory
from tests.db.conftest import scratch_database as scratch_database
from tests.db.read_only import login_role
from tests.db.test_pgvector_missing import plain_postgres_url as plain_postgres_url
from tests.reliability.test_database_faults import pg_ctl
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

USER = "carol"
TURNS = 400  # 25 batches of 16: the server is stopped after the first


class Own:
    """A PostgreSQL server of the test's own, with memstrata's schema."""

    def __init__(self, root: Path) -> None:
        self.embedded = EmbeddedPostgres(root, database="memstrata_midcommand")
        self.url = self.embedded.start()
        self.db = Database.open(
            Settings(environment="test", database_url=self.url, data_dir=root / "data")
        )

    def close(self) -> None:
        self.db.close()
        self.embedded.stop()


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Own]:
    server = Own(tmp_path / "pg")
    yield server
    server.close()


def _env(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(tmp_path / "data"),
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_EMBEDDING_AUTOSTART="false",
        **settings,
    )
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "memstrata.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=env["MEMSTRATA_DATA_DIR"].rsplit("/", 1)[0],
    )
    return done.returncode, done.stdout, done.stderr


def _messages(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("{")]  # not the log


def _one_error(code: int, err: str) -> str:
    """The one ``error:`` line of a command that failed, with nothing like a traceback."""
    assert code == 1, err
    assert "Traceback" not in err and "╭" not in err, err[-3000:]
    errors = [line for line in _messages(err) if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    assert _messages(err)[-1] == errors[0]
    return errors[0]


def test_reindex_stopped_by_a_database_shutdown_is_one_line(
    own: Own, tmp_path: Path, embedding_server: LocalEmbeddingServer
) -> None:
    indexer = Indexer(own.db.sessions, None)  # stored without a vector, as during an outage
    for n in range(TURNS):
        indexer.index_turn(USER, f"s{n // 50}", n % 50, f"turn {n}: I played the guitar", "")
    own.db.close()
    env = _env(
        tmp_path,
        MEMSTRATA_DATABASE_URL=own.url,
        MEMSTRATA_EMBEDDING_BASE_URL=embedding_server.base_url,
        MEMSTRATA_EMBEDDING_MODEL=MODEL_NAME,
    )
    log = tmp_path / "reindex.err"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "memstrata.cli", "reindex", "--user", USER, "--batch", "16"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    try:
        wait_for(lambda: "embedded 16 of" in log.read_text(), 90, "the first batch")
        pg_ctl(own.embedded.pgdata, "-m", "fast", "-w", "stop")
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    line = _one_error(code, log.read_text())
    assert line.startswith("error: memstrata reindex stopped: lost the connection to PostgreSQL")
    # The cause in a few words (libpq's last ones), not the socket's path or the statement.
    cause = line.split("PostgreSQL (", 1)[1].split(")", 1)[0]
    assert 0 < len(cause) < 80 and "/" not in cause, line
    # What happens to the batch it had claimed, and how to go on.
    assert "stays claimed until PostgreSQL finds this run gone" in line, line
    assert f"run `memstrata reindex --user {USER}` again, which takes it over" in line, line


@pytest.fixture
def locked(own: Own) -> Iterator[None]:
    """``memory_embeddings`` locked ACCESS EXCLUSIVE by another session, as a migration or
    an operator's ``LOCK TABLE`` holds it."""
    Indexer(own.db.sessions, None).index_turn(USER, "s", 0, "I played the guitar", "")
    engine = create_engine(own.url)
    try:
        with engine.connect() as conn:
            conn.execute(text("LOCK TABLE memory_embeddings IN ACCESS EXCLUSIVE MODE"))
            yield
            conn.rollback()
    finally:
        engine.dispose()


def test_search_that_times_out_on_a_lock_is_one_line(
    own: Own, locked: None, tmp_path: Path
) -> None:
    url = own.url + ("&" if "?" in own.url else "?") + "options=-c%20lock_timeout%3D1000"
    started = time.monotonic()
    code, _out, err = _cli(_env(tmp_path, MEMSTRATA_DATABASE_URL=url), "search", "-u", USER, "x")
    line = _one_error(code, err)
    assert time.monotonic() - started < 60
    assert line.startswith("error: memstrata search stopped: ")
    assert "lock" in line and "lock_timeout" in line and "run it again" in line, line


def test_a_database_url_that_is_no_url_says_so(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    code, _out, err = _cli(
        _env(tmp_path, MEMSTRATA_DATABASE_URL="not a url"), "user", "list", timeout=60
    )
    line = _one_error(code, err)
    assert "got scheme 'none'" not in line
    assert "MEMSTRATA_DATABASE_URL: is not a URL" in line, line
    assert "postgresql://user:password@host:5432/" in line, line


def test_db_status_without_pgvector_names_the_fix_upgrade_would_give(
    plain_postgres_url: str, tmp_path: Path
) -> None:
    """It said "run `memstrata db upgrade`", which then failed: install pgvector."""
    env = _env(tmp_path, MEMSTRATA_DATABASE_URL=plain_postgres_url)
    (tmp_path / "data").mkdir()
    code, out, err = _cli(env, "db", "status", timeout=60)
    line = _one_error(code, err)
    assert "pgvector" in line and "install pgvector" in line, line
    assert "run `memstrata db upgrade`" not in line
    assert "current     None" in out  # the status itself is still printed
    upgrade_code, _out, upgrade_err = _cli(env, "db", "upgrade", timeout=60)
    assert upgrade_code == 1 and "install pgvector" in upgrade_err


def test_db_status_of_an_empty_database_says_who_may_create_pgvector(
    scratch_database: ScratchFactory, tmp_path: Path
) -> None:
    """pgvector installed, not created: a superuser's `db upgrade` creates it (status says
    run it, exit 2, as before); another role's stops at CREATE EXTENSION, so status says
    what that refusal says (exit 1)."""
    (tmp_path / "data").mkdir()
    url = scratch_database("memstrata_status_novec")
    code, _out, err = _cli(_env(tmp_path, MEMSTRATA_DATABASE_URL=url), "db", "status")
    assert code == 2 and _messages(err)[-1].endswith("run `memstrata db upgrade`"), err
    engine = create_engine(url)
    try:
        grants = ["CREATE ON DATABASE memstrata_status_novec"]
        with login_role(engine, "ms_status_owner", grants) as owner_url:
            env = _env(tmp_path, MEMSTRATA_DATABASE_URL=owner_url)
            code, _out, err = _cli(env, "db", "status")
    finally:
        engine.dispose()
    line = _one_error(code, err)
    assert "available but not created" in line and "CREATE EXTENSION vector;" in line, line
