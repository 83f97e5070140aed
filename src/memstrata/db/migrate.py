"""Alembic, driven from code: ``memstrata db upgrade`` and service start-up both call this.

Start-up also refuses, in one line, a database this process could read but not write: a
hot standby or a read-only role (``default_transaction_read_only``), and a role without
SELECT, INSERT, UPDATE and DELETE on memstrata's tables (or USAGE on their sequences).
Such a process used to start, report ready and answer every write with a 500. And it
refuses a schema that records this release's revision (or a newer one) but lacks objects
it brings: a failed restore (``schema_check``).
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from memstrata.db.engine import PGVECTOR_HINT, check_pgvector, describe
from memstrata.db.models import Base
from memstrata.db.schema_check import check_complete
from memstrata.errors import DatabaseSetupError, PgvectorMissingError
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

_SCRIPT_LOCATION = Path(__file__).parent / "alembic"
# Any constant works; it only has to be the same in every memstrata process.
_MIGRATION_LOCK_KEY = 7_311_042_518
# What memstrata does to each of its tables (every one is written; rows are deleted from
# several), and its SERIAL columns' sequences need USAGE for an INSERT.
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
# SQLSTATE of "permission denied" (psycopg's InsufficientPrivilege).
INSUFFICIENT_PRIVILEGE = "42501"
_MISSING_PRIVILEGES = text(
    """
    SELECT t.name, p.privilege
    FROM unnest(CAST(:tables AS text[])) AS t(name)
    CROSS JOIN unnest(CAST(:privileges AS text[])) AS p(privilege)
    WHERE to_regclass(t.name) IS NOT NULL
      AND NOT has_table_privilege(to_regclass(t.name), p.privilege)
    UNION ALL
    SELECT s.oid::regclass::text, 'USAGE'
    FROM unnest(CAST(:tables AS text[])) AS t(name)
    JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass
      AND d.refobjid = to_regclass(t.name) AND d.deptype = 'a'
    JOIN pg_class s ON s.oid = d.objid
    -- CASE: the planner may call the function before it has filtered out non-sequences
    WHERE CASE WHEN s.relkind = 'S' THEN NOT has_sequence_privilege(s.oid, 'USAGE') END
    """
)


def alembic_config(engine: Engine | None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPT_LOCATION))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision(engine: Engine) -> str | None:
    return schema_head()


@cache
def schema_head() -> str | None:
    """The latest migration of this release (e.g. ``0011``): what it brings a schema to."""
    return ScriptDirectory.from_config(alembic_config(None)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return recorded_revision(conn)
    except OperationalError as exc:
        raise DatabaseSetupError(
            f"cannot connect to PostgreSQL at {describe(engine)}: {exc.orig}"
        ) from exc
    except DBAPIError as exc:
        if not _insufficient_privilege(exc):
            raise
        # A role with no grant yet (docs/DEPLOY.md's GRANT step skipped) fails here, before
        # the privilege check: give it that check's one line, not a traceback.
        check_privileges(engine)
        with engine.connect() as conn:
            role = conn.execute(text("SELECT current_user")).scalar_one()
        raise DatabaseSetupError(
            f"role {role} cannot read the schema revision on {describe(engine)} (no SELECT on "
            f"alembic_version): run `GRANT SELECT ON alembic_version TO {role}` as its owner"
        ) from exc


def recorded_revision(conn: Connection) -> str | None:
    """The revision ``alembic_version`` records (None: no table, or no row), read with SQL:
    each Alembic ``MigrationContext`` logs "Context impl PostgresqlImpl." and "Will assume
    transactional DDL." at INFO, and a first start read the revision often enough to log
    them 7 times. A migration itself still logs them, once."""
    if conn.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return None
    revisions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(revisions) > 1:  # memstrata's migrations never branch
        raise DatabaseSetupError(
            f"alembic_version records several revisions ({', '.join(sorted(revisions))}); "
            "memstrata's schema has one line of migrations: keep the newest row"
        )
    return str(revisions[0]) if revisions else None


def _insufficient_privilege(exc: DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE


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
                raise PgvectorMissingError(_extension_problem(engine, conn, exc)) from exc
            found = recorded_revision(conn)
            if current != found and found == head_revision(engine):
                # Another process upgraded it while this one waited for the lock.
                log_event(logger, "db.already_upgraded", revision=found, database=describe(engine))
                return found
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except DBAPIError as exc:
        raise DatabaseSetupError(f"migration failed on {describe(engine)}: {_cause(exc)}") from exc
    revision = current_revision(engine)
    log_event(logger, "db.upgraded", revision=revision, database=describe(engine))
    return revision


def _cause(exc: DBAPIError) -> str:
    """Why a migration failed; refused for lack of rights ("must be owner of table …",
    "permission denied for schema public": a role that may use the tables but not change
    them, as replicas' roles are), its first line (not the statement quoted) and the fix."""
    if not _insufficient_privilege(exc):
        return str(exc.orig)
    first = str(exc.orig).strip().splitlines()[0]
    return (
        f"{first}; this role may not change the schema: run `memstrata db upgrade` once with "
        "MEMSTRATA_DATABASE_URL set to the URL of the role that owns the tables, then "
        "start again (replicas: set MEMSTRATA_MIGRATE_ON_START=false, docs/DEPLOY.md)"
    )


def _extension_problem(engine: Engine, conn: Connection, exc: DBAPIError) -> str:
    """Why CREATE EXTENSION failed, with the fix. Refused for privilege, pgvector is
    installed (PostgreSQL reads its control file before it checks the role) but it is no
    trusted extension: only a superuser may create it, and the migration role need not be
    one."""
    cause = str(exc.orig).strip().replace("\n", " ")
    if not _insufficient_privilege(exc):
        return (
            f"cannot create the pgvector extension on {describe(engine)} ({cause}); {PGVECTOR_HINT}"
        )
    role, database = conn.execute(text("SELECT current_user, current_database()")).one()
    return (
        f"role {role} may not create the pgvector extension on {describe(engine)} ({cause}): "
        f"have a superuser run `CREATE EXTENSION vector;` in database {database} once, "
        "then run `memstrata db upgrade` again"
    )


def ensure_ready(engine: Engine) -> None:
    """Start-up check: a writable primary, pgvector present, schema at head (upgrading if
    behind), and the role's rights on the tables."""
    check_primary(engine)
    current, head = current_revision(engine), head_revision(engine)
    check_recorded_schema(engine, current, head)
    # A new database lacks pgvector, and the upgrade that creates it brings the schema to
    # head too: a second one logged db.upgraded again and re-ran Alembic for nothing.
    upgraded = check_pgvector_or_create(engine)
    if not upgraded and current != head and not _runs_on_newer(engine, current, head):
        upgrade(engine)
    check_privileges(engine)


def records_head(engine: Engine, current: str | None, head: str | None) -> bool:
    """The schema records this release's revision or a newer one: it must hold every
    object of this release's models (the migrations are additive)."""
    return current is not None and (current == head or newer_than_this_release(engine, current))


def check_recorded_schema(engine: Engine, current: str | None, head: str | None) -> None:
    """``DatabaseSetupError`` for a schema that records ``head`` (or newer) but lacks some of
    its objects (a failed restore). Checked before pgvector, whose own message would send
    the operator to `memstrata db upgrade`, which cannot add them."""
    if records_head(engine, current, head):
        check_complete(engine, current)


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
    migrations are additive; docs/DEPLOY.md). Nor does it start where it cannot write.
    """
    check_primary(engine)
    current, head = current_revision(engine), head_revision(engine)
    check_recorded_schema(engine, current, head)
    check_pgvector(engine)
    if current != head and not _runs_on_newer(engine, current, head):
        raise DatabaseSetupError(
            f"the schema on {describe(engine)} is at revision {current or 'none'}, this "
            f"version of memstrata needs {head}; run `memstrata db upgrade` once (or set "
            "MEMSTRATA_MIGRATE_ON_START=true on a single process)"
        )
    check_privileges(engine)


def check_primary(engine: Engine) -> None:
    """``DatabaseSetupError`` unless this connection may write: not a hot standby
    (``pg_is_in_recovery()``) and not read-only by default for its role or database."""
    try:
        with engine.connect() as conn:
            role, standby, read_only = conn.execute(
                text(
                    "SELECT current_user, pg_is_in_recovery(), "
                    "current_setting('transaction_read_only') = 'on'"
                )
            ).one()
    except OperationalError as exc:
        raise DatabaseSetupError(
            f"cannot connect to PostgreSQL at {describe(engine)}: {exc.orig}"
        ) from exc
    if standby:
        raise DatabaseSetupError(
            f"{describe(engine)} is a hot standby (pg_is_in_recovery() is true), which "
            "refuses every write: point MEMSTRATA_DATABASE_URL at the primary"
        )
    if read_only:
        raise DatabaseSetupError(
            f"transactions of role {role} on {describe(engine)} are read-only "
            f"(default_transaction_read_only is on): run `ALTER ROLE {role} SET "
            "default_transaction_read_only = off` (or the same for the database), or use "
            "a role that may write"
        )


def check_privileges(engine: Engine) -> None:
    """``DatabaseSetupError`` naming what is missing unless the role may read and write
    every memstrata table (its grants lost in a restore, a reporting role)."""
    with engine.connect() as conn:
        role = conn.execute(text("SELECT current_user")).scalar_one()
        missing = conn.execute(
            _MISSING_PRIVILEGES,
            {"tables": sorted(Base.metadata.tables), "privileges": list(TABLE_PRIVILEGES)},
        ).all()
    if not missing:
        return
    lacking: dict[str, list[str]] = {}
    for relation, privilege in missing:
        lacking.setdefault(relation, []).append(privilege)
    alike: dict[tuple[str, ...], list[str]] = {}  # relations missing the same privileges
    for relation, privileges in sorted(lacking.items()):
        alike.setdefault(tuple(privileges), []).append(relation)
    lacks = "; ".join(f"{', '.join(p)} on {_some(names)}" for p, names in alike.items())
    raise DatabaseSetupError(
        f"role {role} cannot write memstrata's tables on {describe(engine)} (no {lacks}): "
        f"run `GRANT {', '.join(TABLE_PRIVILEGES)} ON ALL TABLES IN SCHEMA public TO {role}; "
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}` as their owner (with "
        "your schema's name if it is not public), or use the role that owns them"
    )


def check_pgvector_or_create(engine: Engine) -> bool:
    """Whether it upgraded: pgvector was missing, and the upgrade that created it (when
    the server has it, else it raises loudly) brought the schema to head."""
    try:
        check_pgvector(engine)
    except PgvectorMissingError:
        upgrade(engine)
        return True
    return False


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} more"
