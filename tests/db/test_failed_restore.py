"""A real failed restore (docs/DEPLOY.md, "Backup and restore"), refused, and its fix.

``pg_restore`` run by the database's owner, not a superuser, cannot create the pgvector
extension: it skips ``memory_embeddings`` and everything on it, exits with status 1 and
still restores ``alembic_version``. Start-up used to take that database for an up-to-date
one. The same backup restored into a new database in which a superuser created the
extension first is complete; ``memstrata db upgrade`` cannot mend the broken one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, make_url, text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import upgrade
from memstrata.db.schema_check import schema_gaps
from memstrata.errors import DatabaseSetupError

from .read_only import BIN

OWNER = "memstrata_restorer"
TARGETS = ("restore_broken", "restore_fixed")


def _settings(url: str, tmp_path: Path, *, migrate: bool) -> Settings:
    return Settings(
        environment="test", database_url=url, data_dir=tmp_path, migrate_on_start=migrate
    )


def _url(pg_url: str, database: str, user: str = "postgres") -> str:
    url = make_url(pg_url).set(database=database, username=user, password=None)
    return url.render_as_string(hide_password=False)


def _conninfo(pg_url: str, database: str, user: str) -> str:
    return f"host={make_url(pg_url).query['host']} user={user} dbname={database}"


def _run(*args: object) -> subprocess.CompletedProcess[str]:
    command = [str(a) for a in args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def admin(pg_url: str) -> Iterator[Engine]:
    """The superuser on the server's ``postgres`` database; the source, the targets and
    the owner role are dropped afterwards."""
    engine = create_engine(_url(pg_url, "postgres"), isolation_level="AUTOCOMMIT")

    def drop() -> None:
        with engine.connect() as conn:
            for name in ("restore_source", *TARGETS):
                conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(text(f"DROP ROLE IF EXISTS {OWNER}"))

    drop()
    yield engine
    drop()
    engine.dispose()


def _dump(pg_url: str, admin: Engine, tmp_path: Path) -> Path:
    """A migrated database with a file and a search row, dumped with ``pg_dump -Fc``."""
    with admin.connect() as conn:
        conn.execute(text("CREATE DATABASE restore_source"))
    source = _url(pg_url, "restore_source")
    Database.open(_settings(source, tmp_path, migrate=True)).close()
    engine = create_engine(source)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO user_memory (user_id, file_type, content) "
                    "VALUES ('u', 'user_md', 'likes tea');"
                    "INSERT INTO memory_embeddings (user_id, chunk_text) VALUES ('u', 'tea')"
                )
            )
    finally:
        engine.dispose()
    dump = tmp_path / "memstrata.dump"
    done = _run(
        BIN / "pg_dump", "-Fc", "-f", dump, "-d", _conninfo(pg_url, "restore_source", "postgres")
    )
    assert done.returncode == 0, done.stderr
    return dump


def _restore(pg_url: str, database: str, dump: Path) -> subprocess.CompletedProcess[str]:
    """``pg_restore`` as the new database's owner, who is no superuser."""
    conninfo = _conninfo(pg_url, database, OWNER)
    return _run(BIN / "pg_restore", "--no-owner", "--no-acl", "--no-comments", "-d", conninfo, dump)


def test_a_restore_without_pgvector_is_refused_and_a_restore_after_create_extension_starts(
    pg_url: str, admin: Engine, tmp_path: Path
) -> None:
    dump = _dump(pg_url, admin, tmp_path)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {OWNER} LOGIN"))
        for name in TARGETS:
            conn.execute(text(f"CREATE DATABASE {name} OWNER {OWNER}"))

    failed = _restore(pg_url, "restore_broken", dump)
    assert failed.returncode == 1
    assert "permission denied to create extension" in failed.stderr, failed.stderr
    assert "errors ignored on restore" in failed.stderr
    broken = _url(pg_url, "restore_broken", OWNER)
    for migrate in (False, True):
        with pytest.raises(DatabaseSetupError) as caught:
            Database.open(_settings(broken, tmp_path, migrate=migrate))
        assert "is incomplete: it records revision 0011 but lacks extension vector, table " in (
            str(caught.value)
        )
        assert "memory_embeddings — " in str(caught.value)

    # What does not mend it: the extension created afterwards and `memstrata db upgrade`.
    superuser = create_engine(_url(pg_url, "restore_broken"))
    try:
        with superuser.begin() as conn:
            conn.execute(text("CREATE EXTENSION vector"))
        upgrade(superuser)
        assert [str(o) for o in schema_gaps(superuser)] == ["table memory_embeddings"]
    finally:
        superuser.dispose()

    # What does: the extension first, in a new database, then the same restore.
    fixed_by_superuser = create_engine(_url(pg_url, "restore_fixed"))
    try:
        with fixed_by_superuser.begin() as conn:
            conn.execute(text("CREATE EXTENSION vector"))
    finally:
        fixed_by_superuser.dispose()
    done = _restore(pg_url, "restore_fixed", dump)
    assert done.returncode == 0, done.stderr
    db = Database.open(_settings(_url(pg_url, "restore_fixed", OWNER), tmp_path, migrate=False))
    try:
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT chunk_text FROM memory_embeddings")).scalars().all()
        assert rows == ["tea"]
    finally:
        db.close()
