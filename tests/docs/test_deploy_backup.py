"""docs/DEPLOY.md's backup and restore with the embedded server, run as written: the
backup block while the embedded server of a data directory runs, the restore block into a
new data directory, with the wheel's PostgreSQL 18 programs and ``memstrata db url``; the
restored database holds what the backup did."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from tests.db.read_only import BIN as PGBIN
from tests.docs.served import BIN, blocks

ROW = "likes oolong tea"
AS_ROOT = 'AS="runuser -u embedded_postgres --"'


def _run(script: str, data_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in bash with ``data_dir`` as MEMSTRATA_DATA_DIR; its status is its last
    command's (not ``-e``: the restore's first ``db status`` exits 2 by design)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env |= {
        "MEMSTRATA_DATA_DIR": str(data_dir),
        "MEMSTRATA_ENVIRONMENT": "development",
        "PGBIN": str(PGBIN),
        "PATH": f"{BIN}:/usr/sbin:/sbin:{env['PATH']}",  # the docs' bare `memstrata`; runuser
    }
    return subprocess.run(
        ["bash", "-uc", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _open(data_dir: Path) -> Database:
    return Database.open(Settings(environment="development", data_dir=data_dir))


def test_the_backup_and_restore_blocks_as_written(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    (backup,) = blocks("docs/DEPLOY.md", "sh", 'pg_dump" -Fc')
    (restore,) = blocks("docs/DEPLOY.md", "sh", "pg_ctl")
    assert "memstrata db url" in backup and "memstrata db url" in restore
    source = tmp_path_factory.mktemp("b")  # short: the sockets' paths must fit in 107 bytes
    restored = tmp_path_factory.mktemp("r")
    restored.rmdir()  # "new and empty": `db status` creates it
    restore = restore.replace("/srv/memstrata-restored", str(restored))
    assert AS_ROOT in restore
    if os.geteuid() != 0:  # the server runs as this user
        restore = restore.replace(AS_ROOT, "AS=")

    db = _open(source)  # the embedded server runs, as under `memstrata serve`
    try:
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO user_memory (user_id, file_type, content) "
                    "VALUES ('alice', 'user_md', :c)"
                ),
                {"c": ROW},
            )
        done = _run(backup, source, tmp_path)
        assert done.returncode == 0, done.stderr
    finally:
        db.close()
    assert (tmp_path / "memstrata.dump").stat().st_size > 0

    done = _run(restore, restored, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "up_to_date  True" in done.stdout and "complete    True" in done.stdout, done.stdout
    db = _open(restored)
    try:
        with db.engine.connect() as conn:
            content = conn.execute(
                text("SELECT content FROM user_memory WHERE user_id = 'alice'")
            ).scalar()
    finally:
        db.close()
    assert content == ROW
