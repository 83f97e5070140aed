"""Alembic, driven from code: ``memstrata db upgrade`` and service start-up both call this."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from memstrata.db.engine import PGVECTOR_HINT, check_pgvector, describe
from memstrata.errors import DatabaseSetupError, PgvectorMissingError
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

_SCRIPT_LOCATION = Path(__file__).parent / "alembic"
# Any constant works; it only has to be the same in every memstrata process.
_MIGRATION_LOCK_KEY = 7_311_042_518


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPT_LOCATION))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision(engine: Engine) -> str | None:
    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        raise DatabaseSetupError(
            f"cannot connect to PostgreSQL at {describe(engine)}: {exc.orig}"
        ) from exc


def upgrade(engine: Engine) -> str | None:
    """Create pgvector and bring the schema to head, serialised across processes."""
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK_KEY})
            try:
                with conn.begin_nested():
                    conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            except DBAPIError as exc:
                raise PgvectorMissingError(
                    f"cannot create the pgvector extension on {describe(engine)} "
                    f"({str(exc.orig).strip()}); {PGVECTOR_HINT}"
                ) from exc
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except DBAPIError as exc:
        raise DatabaseSetupError(f"migration failed on {describe(engine)}: {exc.orig}") from exc
    revision = current_revision(engine)
    log_event(logger, "db.upgraded", revision=revision, database=describe(engine))
    return revision


def ensure_ready(engine: Engine) -> None:
    """Start-up check: pgvector present and schema at head (upgrading if behind)."""
    check_pgvector_or_create(engine)
    if current_revision(engine) != head_revision(engine):
        upgrade(engine)


def check_ready(engine: Engine) -> None:
    """Start-up check for a replica (``MEMSTRATA_MIGRATE_ON_START=false``): never migrates.

    A replica that finds the schema behind (or ahead of) its code refuses to start rather
    than run against tables it does not know: migrations belong to ``memstrata db
    upgrade``, run once before the rollout.
    """
    check_pgvector(engine)
    current, head = current_revision(engine), head_revision(engine)
    if current != head:
        raise DatabaseSetupError(
            f"the schema on {describe(engine)} is at revision {current or 'none'}, this "
            f"version of memstrata needs {head}; run `memstrata db upgrade` once (or set "
            "MEMSTRATA_MIGRATE_ON_START=true on a single process)"
        )


def check_pgvector_or_create(engine: Engine) -> None:
    try:
        check_pgvector(engine)
    except PgvectorMissingError:
        upgrade(engine)  # creates it when the server has it, else raises loudly
