"""The ``memstrata`` command line: thin over the services; errors say how to fix them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, NoReturn, TypeVar

import typer
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import current_revision, head_revision, upgrade
from memstrata.errors import MemstrataError
from memstrata.logs import configure_logging

app = typer.Typer(help="Layered, per-user memory for AI agents.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema (Alembic) commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")

T = TypeVar("T")


def fail(message: str, code: int = 1) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def load_settings() -> Settings:
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"MEMSTRATA_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        )
        fail(f"invalid configuration — {problems}")
    configure_logging(settings.log_level, settings.log_json)
    return settings


@contextmanager
def open_database(settings: Settings, *, migrate: bool = True) -> Iterator[Database]:
    try:
        db = Database.open(settings, migrate=migrate)
    except MemstrataError as exc:
        fail(str(exc))
    try:
        yield db
    finally:
        db.close()


def guarded(fn: Callable[[], T]) -> T:
    """Turn domain errors into a one-line CLI message and exit status 1."""
    try:
        return fn()
    except MemstrataError as exc:
        fail(str(exc))


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


def main() -> None:
    app()
