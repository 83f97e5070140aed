"""``memstrata db``: schema migrations."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from memstrata.cli.app import app, guarded, load_settings, open_database
from memstrata.db.migrate import current_revision, head_revision, upgrade

db_app = typer.Typer(help="Database schema (Alembic) commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create the pgvector extension and migrate the schema to the latest revision."""
    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        revision = guarded(lambda: upgrade(db.engine))
        typer.echo(f"database at revision {revision}")


@db_app.command("status")
def db_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show the current and latest schema revision."""
    settings = load_settings()
    with open_database(settings, migrate=False) as db:
        current = guarded(lambda: current_revision(db.engine))
        head = head_revision(db.engine)
        status = {
            "database": db.engine.url.render_as_string(hide_password=True),
            "embedded": db.embedded is not None,
            "current": current,
            "head": head,
            "up_to_date": current == head,
        }
        if as_json:
            typer.echo(json.dumps(status))
        else:
            for key, value in status.items():
                typer.echo(f"{key:11s} {value}")
            if current != head:
                typer.echo("run `memstrata db upgrade` to migrate")
