"""``memstrata db``: schema migrations."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from memstrata.cli.app import app, guarded, load_settings, open_database
from memstrata.db.migrate import (
    current_revision,
    head_revision,
    newer_than_this_release,
    upgrade,
)

db_app = typer.Typer(help="Database schema (Alembic) commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the pgvector extension and migrate the schema to the latest revision."""
    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        before = guarded(lambda: current_revision(db.engine))
        revision = guarded(lambda: upgrade(db.engine))
        # What it did, for the CI step or Job log an operator reads afterwards.
        if before == revision:
            typer.echo(f"database at revision {revision} (already up to date)")
        else:
            typer.echo(f"database at revision {revision} (was {before or 'empty'})")


@db_app.command("status")
def db_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show the current and latest schema revision."""
    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        current = guarded(lambda: current_revision(db.engine))
        head = head_revision(db.engine)
        newer = newer_than_this_release(db.engine, current)
        status = {
            "database": db.engine.url.render_as_string(hide_password=True),
            "embedded": db.embedded is not None,
            "current": current,
            "head": head,
            "up_to_date": current == head,
            "newer_than_this_release": newer,
        }
        if as_json:
            typer.echo(json.dumps(status))
        else:
            for key, value in status.items():
                typer.echo(f"{key:11s} {value}")
            if newer:
                typer.echo(
                    "a newer memstrata migrated this schema: this release runs on it, and "
                    "only that release's `memstrata db upgrade` migrates it further"
                )
            elif current != head:
                typer.echo("run `memstrata db upgrade` to migrate")
