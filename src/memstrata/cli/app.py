"""The Typer application and the helpers every command shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn, TypeVar

import typer
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import MemstrataError
from memstrata.logs import configure_logging
from memstrata.runtime import Memstrata

app = typer.Typer(
    help="Layered, per-user memory for AI agents.",
    no_args_is_help=True,
    # Docstrings are wrapped at 100 columns; markdown mode joins a paragraph's lines.
    rich_markup_mode="markdown",
)

T = TypeVar("T")


def fail(message: str, code: int = 1) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def load_settings(*, log_level: str | None = "WARNING") -> Settings:
    """Settings from the environment; a bad value is a one-line message naming the variable.

    Commands log at WARNING unless they are long-running services (``log_level=None`` keeps
    the configured level).
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"MEMSTRATA_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        )
        fail(f"invalid configuration — {problems}")
    configure_logging(log_level or settings.log_level, settings.log_json)
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


@contextmanager
def open_runtime(settings: Settings, *, require_embeddings: bool = False) -> Iterator[Memstrata]:
    """The library runtime with the configured (or a local, autostarted) embedding model."""
    from memstrata.retrieval.autostart import embedding_spec

    with embedding_spec(settings) as spec:
        if spec is None and require_embeddings:
            fail(
                "no embedding API configured — set MEMSTRATA_EMBEDDING_BASE_URL and "
                "MEMSTRATA_EMBEDDING_MODEL, or enable MEMSTRATA_EMBEDDING_AUTOSTART"
            )
        try:
            mem = Memstrata.open(settings, embedding_spec=spec)
        except MemstrataError as exc:
            fail(str(exc))
        try:
            yield mem
        finally:
            mem.close()


def guarded(fn: Callable[[], T]) -> T:
    """Turn domain errors into a one-line CLI message and exit status 1."""
    try:
        return fn()
    except MemstrataError as exc:
        fail(str(exc))
