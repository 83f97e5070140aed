"""`memstrata user erase` leaves its audit line (`user.erased`, with the user id and the
counts) on stderr whatever the log level, and an explicit ``MEMSTRATA_LOG_LEVEL`` reaches
the short commands, whose quiet WARNING is only the default (docs/DEPLOY.md section 7).

Run as real processes: the logging a command sets up is the operator's. Before, the
documented erase left stderr empty, with ``MEMSTRATA_LOG_LEVEL=INFO`` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memstrata.db.database import Database
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.indexer import Indexer


def memstrata(tmp_path: Path, pg_url: str, *args: str, **settings: str) -> tuple[str, str]:
    """stdout and stderr of ``memstrata ARGS`` on the test database, run from ``tmp_path``
    with only these ``MEMSTRATA_*`` variables; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_DATA_DIR=str(tmp_path / "data"),
        MEMSTRATA_SANDBOX_ROOT=str(tmp_path / "boxes"),
        MEMSTRATA_EMBEDDING_AUTOSTART="false",
        **{f"MEMSTRATA_{name}": value for name, value in settings.items()},
    )
    done = subprocess.run(
        [sys.executable, "-m", "memstrata.cli", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def events(stderr: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stderr.splitlines()]
    assert all(isinstance(line, dict) for line in lines), stderr
    return lines


@pytest.fixture
def kim(db: Database, store: MemoryStore) -> None:
    """Three memory files and one conversation turn of user kim."""
    store.provision_default_files("kim")
    Indexer(db.sessions, None).index_turn("kim", "s", 0, "the blue door is in Lisbon")


def test_an_erase_logs_its_audit_line_at_the_default_level(
    kim: None, pg_url: str, tmp_path: Path
) -> None:
    out, err = memstrata(tmp_path, pg_url, "user", "erase", "--user", "kim", "--yes", "--json")
    printed = json.loads(out)
    assert printed["deleted"]["user_memory"] == 3
    assert printed["deleted"]["memory_embeddings"] == 1
    (erased,) = [e for e in events(err) if e["event"] == "user.erased"]
    assert erased["level"] == "info" and erased["logger"] == "memstrata.audit"
    assert erased["user_id"] == "kim" and erased["deleted"] == printed["deleted"]
    assert erased["generation"] == printed["index_generation"]
    assert erased["sandbox"] == printed["sandbox"]
    # The quiet default stays: the audit line is the only INFO line.
    assert [e["event"] for e in events(err) if e["level"] == "info"] == ["user.erased"]


def test_the_audit_line_in_text_and_above_its_level(kim: None, pg_url: str, tmp_path: Path) -> None:
    # An operator who set ERROR to quiet the diagnostics still gets the erasure's record.
    _, err = memstrata(
        tmp_path, pg_url, "user", "erase", "-u", "kim", "-y", LOG_JSON="false", LOG_LEVEL="ERROR"
    )
    (line,) = [line for line in err.splitlines() if "user.erased" in line]
    assert line.startswith("info    memstrata.audit: user.erased user_id=kim "), err
    assert "'user_memory': 3, 'memory_embeddings': 1," in line, line


@pytest.mark.parametrize("where", ["environment", ".env"])
def test_an_explicit_log_level_reaches_a_short_command(
    database: Database, pg_url: str, tmp_path: Path, where: str
) -> None:
    # `db upgrade` on a migrated database changes nothing and logs db.upgraded at INFO.
    _, quiet = memstrata(tmp_path, pg_url, "db", "upgrade")
    assert "db.upgraded" not in quiet, quiet  # the default: short commands log at WARNING
    if where == ".env":
        (tmp_path / ".env").write_text("MEMSTRATA_LOG_LEVEL=INFO\n")
        _, err = memstrata(tmp_path, pg_url, "db", "upgrade")
    else:
        _, err = memstrata(tmp_path, pg_url, "db", "upgrade", LOG_LEVEL="INFO")
    (upgraded,) = [e for e in events(err) if e["event"] == "db.upgraded"]
    assert upgraded["level"] == "info" and upgraded["revision"]
