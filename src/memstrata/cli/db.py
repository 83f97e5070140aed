"""``memstrata db``: schema migrations, and the URL client programs connect with."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from memstrata.cli.app import app, fail, guarded, load_settings, open_database

if TYPE_CHECKING:
    from sqlalchemy import Engine

db_app = typer.Typer(
    help="Database schema (Alembic) commands, the URL psql or pg_dump connects with, and the "
    "step after a restore.",
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the pgvector extension and migrate the schema to the latest revision."""
    # Alembic and SQLAlchemy: imported by the commands that use them, not by every command.
    from memstrata.db.migrate import current_revision, upgrade

    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        before = guarded(lambda: current_revision(db.engine))
        revision = guarded(lambda: upgrade(db.engine))
        # What it did, for the CI step or Job log an operator reads afterwards.
        if before == revision:
            typer.echo(f"database at revision {revision} (already up to date)")
        else:
            typer.echo(f"database at revision {revision} (was {before or 'empty'})")


# `db status` exit statuses, so a CI step or an init container can gate on it (README,
# docs/DEPLOY.md section 2): 0 up to date, 1 incomplete (a failed restore; also any error),
# 2 behind this release (or empty), 3 migrated by a newer release.
BEHIND, NEWER = 2, 3


@db_app.command("status")
def db_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show the current and latest schema revision, and whether the schema holds every
    table, column and index that revision brings. Exit status 0 when it is up to date; 1
    when it is incomplete (a failed restore), or behind on a server where pgvector is not
    installed or not created (the fix `memstrata db upgrade` would ask for, said at once); 2
    when it is behind this release (run `memstrata db upgrade`); 3 when a newer release
    migrated it (upgrade memstrata)."""
    from memstrata.db.engine import check_pgvector, describe
    from memstrata.db.migrate import (
        current_revision,
        head_revision,
        newer_than_this_release,
        records_head,
    )
    from memstrata.db.schema_check import incomplete_message, schema_gaps

    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        current = guarded(lambda: current_revision(db.engine))
        head = head_revision(db.engine)
        newer = newer_than_this_release(db.engine, current)
        # Only a schema at (or past) head can be checked against this release's models.
        missing = schema_gaps(db.engine) if records_head(db.engine, current, head) else None
        status = {
            "database": db.engine.url.render_as_string(hide_password=True),
            "embedded": db.embedded is not None,
            "current": current,
            "head": head,
            "up_to_date": current == head and not missing,
            "newer_than_this_release": newer,
            "complete": None if missing is None else not missing,
            "missing": [str(o) for o in missing or []],
        }
        if as_json:
            typer.echo(json.dumps(status))
        else:
            for key, value in status.items():
                shown = ", ".join(value) if isinstance(value, list) else value
                typer.echo(f"{key:11s} {shown}")
        # An incomplete schema's error is the advice: neither upgrade helps it.
        if missing:
            fail(incomplete_message(db.engine, current, missing))
        behind = revision_problem(describe(db.engine), current, head, newer=newer)
        if behind is not None and not newer and not _upgrade_gets_pgvector(db.engine):
            # `db upgrade` creates pgvector first and would stop there: its fix, at once.
            guarded(lambda: check_pgvector(db.engine))
        if behind is not None:
            fail(*behind)


@db_app.command("restored")
def db_restored() -> None:
    """Run once after restoring a backup (`pg_restore`, a physical or point-in-time
    restore, a failover to an asynchronous standby), before the replicas start, with the URL
    of the role that owns the tables: lifts every memory file's version by 1,000,000 in one
    transaction, so that a version a client read before the restore no longer matches (a
    stale If-Match is a 409, not a write over an edit made since the restore); the versions
    noted for sandbox files, the search indexes' generations and the search rows' ids are
    lifted with them (docs/DEPLOY.md, "Backup and restore"). Prints one JSON object: what
    it lifted. Run twice, it lifts twice, which is
    harmless. Exit status 0 when it lifted; 1 on an error (an incomplete schema, a lift
    that would take a version past 2147483647, a role that may not set the id sequence:
    nothing changed); 2 when the database holds no memstrata schema (restore first) or one
    behind this release (run `memstrata db upgrade` first); 3 when a newer release migrated
    it (run that release's)."""
    from memstrata.db.engine import describe
    from memstrata.db.migrate import current_revision, head_revision, newer_than_this_release
    from memstrata.db.restored import lift_after_restore
    from memstrata.db.schema_check import check_complete

    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        database = describe(db.engine)
        current = guarded(lambda: current_revision(db.engine))
        if current is None:
            fail(
                f"the database on {database} has no memstrata schema: nothing restored to "
                "lift; restore the backup first and check it with `memstrata db status` "
                '(docs/DEPLOY.md, "Backup and restore")',
                BEHIND,
            )
        newer = newer_than_this_release(db.engine, current)
        problem = revision_problem(database, current, head_revision(db.engine), newer=newer)
        if problem is not None:
            message, code = problem
            fail(f"{message}; then run `memstrata db restored`", code)
        guarded(lambda: check_complete(db.engine, current))
        lifted = guarded(lambda: lift_after_restore(db.engine))
        typer.echo(json.dumps(lifted.as_json()))


# Whether pgvector is created, or `db upgrade` could create it: a superuser may, another
# role only if it is a trusted extension and the role may create in the database.
_PGVECTOR_REACHABLE = """
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'vector')
    OR EXISTS (SELECT FROM pg_available_extensions a
               JOIN pg_available_extension_versions v
                 ON v.name = a.name AND v.version = a.default_version
               WHERE a.name = 'vector' AND (
                   (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
                   OR (v.trusted AND has_database_privilege(current_database(), 'CREATE'))))
"""


def _upgrade_gets_pgvector(engine: Engine) -> bool:
    from sqlalchemy import text

    with engine.connect() as conn:
        return bool(conn.execute(text(_PGVECTOR_REACHABLE)).scalar())


def revision_problem(
    database: str, current: str | None, head: str | None, *, newer: bool
) -> tuple[str, int] | None:
    """The one-line message and exit status of a schema that is not at this release's
    head, with what to do; None when it is."""
    if current == head:
        return None
    if newer:
        return (
            f"the schema on {database} is at revision {current}, newer than this release's "
            f"latest ({head}): a newer memstrata migrated this schema, and this release runs "
            "on it; upgrade memstrata to that release (only its `memstrata db upgrade` "
            "migrates further)",
            NEWER,
        )
    at = f"is at revision {current}" if current is not None else "has no memstrata schema"
    return (
        f"the schema on {database} {at}, this release needs {head}: run `memstrata db upgrade`",
        BEHIND,
    )


# `db url` exit statuses: 0 the URL printed, 1 an error (a setting, an unreadable
# postmaster.pid), 2 no embedded server running to connect to (with how to start it).
NOT_RUNNING = 2


@db_app.command("url")
def db_url(
    show_password: Annotated[
        bool, typer.Option("--show-password", help="Print the password instead of ***.")
    ] = False,
) -> None:
    """Print the URL a PostgreSQL client program (psql, pg_dump, pg_restore) connects with:
    MEMSTRATA_DATABASE_URL in libpq's form (`postgresql://`), its password shown as *** unless
    --show-password; with the embedded server, its socket
    (`postgresql://postgres@/memstrata?host=<socket dir>&port=<port>`), read from its
    postmaster.pid. It never starts the server. Exit status 0 when it printed the URL; 1 on
    an error (a setting, an unreadable postmaster.pid); 2 when the embedded server is not
    running, or the data directory holds none, saying how to start it."""
    from memstrata.db.tool_url import has_cluster, libpq_url, running_postmaster

    settings = load_settings()
    url = settings.external_database_url
    if url is not None:
        typer.echo(libpq_url(url, show_password=show_password))
        return
    data_dir = settings.data_dir.resolve()
    pgdata = data_dir / "pgdata"
    try:
        running = running_postmaster(pgdata)
    except OSError as exc:
        fail(
            f"cannot read {pgdata / 'postmaster.pid'} ({exc.strerror or exc}): run this as "
            'root or as the embedded server\'s OS user (docs/DEPLOY.md, "Backup and restore")'
        )
    if running is not None:
        typer.echo(running.url())
        return
    if not has_cluster(pgdata):
        fail(
            f"there is no embedded PostgreSQL in {pgdata}: MEMSTRATA_DATA_DIR={data_dir} is "
            "not a data directory memstrata has run in (the memory may be in another); set "
            "MEMSTRATA_DATA_DIR to the one `memstrata serve` uses, or start one here with "
            "`memstrata serve`",
            NOT_RUNNING,
        )
    fail(
        f"the embedded PostgreSQL in {pgdata} is not running: it runs while a memstrata "
        f"process of that data directory does; start `memstrata serve` with "
        f"MEMSTRATA_DATA_DIR={data_dir}, or, with none running, start the server alone with "
        'the wheel\'s pg_ctl (docs/DEPLOY.md, "Backup and restore")',
        NOT_RUNNING,
    )
