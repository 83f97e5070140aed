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


def newer_than_this_release(engine: Engine, revision: str | None) -> bool:
    """``revision`` is not one of this release's migrations: a newer release migrated."""
    if revision is None:
        return False
    script = ScriptDirectory.from_config(alembic_config(engine))
    known = {r.revision for r in script.walk_revisions()}
    return revision not in known


def _newer_schema(engine: Engine, current: str | None, head: str | None) -> str:
    return (
        f"the schema on {describe(engine)} is at revision {current}, newer than this "
        f"release's latest ({head}): a newer memstrata migrated it"
    )


def upgrade(engine: Engine) -> str | None:
    """Create pgvector and bring the schema to head, serialised across processes."""
    current = current_revision(engine)
    if newer_than_this_release(engine, current):
        raise DatabaseSetupError(
            _newer_schema(engine, current, head_revision(engine))
            + "; nothing to upgrade here — run `memstrata db upgrade` of that release"
        )
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
    current, head = current_revision(engine), head_revision(engine)
    if current != head and not _runs_on_newer(engine, current, head):
        upgrade(engine)


def _runs_on_newer(engine: Engine, current: str | None, head: str | None) -> bool:
    """A schema migrated by a newer release: run on it (migrations are additive, so the
    previous release keeps working during a rollout, after a restart or on a rollback),
    and say so."""
    if not newer_than_this_release(engine, current):
        return False
    log_event(
        logger,
        "db.schema_newer",
        logging.WARNING,
        revision=current,
        head=head,
        detail=_newer_schema(engine, current, head),
    )
    return True


def check_ready(engine: Engine) -> None:
    """Start-up check for a replica (``MEMSTRATA_MIGRATE_ON_START=false``): never migrates.

    A replica that finds the schema behind its code refuses to start rather than run
    against tables it lacks: migrations belong to ``memstrata db upgrade``, run once before
    the rollout. A schema migrated by a newer release is run on, with a warning (the
    migrations are additive; docs/DEPLOY.md).
    """
    check_pgvector(engine)
    current, head = current_revision(engine), head_revision(engine)
    if current != head and not _runs_on_newer(engine, current, head):
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
