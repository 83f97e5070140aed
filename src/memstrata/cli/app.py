"""The Typer application and the helpers every command shares."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar, get_args

import typer

from memstrata.cli.release import release_line
from memstrata.errors import MemstrataError, setting_variable
from memstrata.terminal import visible

# Every command pays for what this module imports, ``--version`` and ``--help`` included:
# what only some commands need (the settings, the database, the runtime, pydantic) is
# imported in the function that needs it (tests/cli/test_startup_imports.py).
if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from memstrata.config import EmbeddingModelSpec, Settings
    from memstrata.db.database import Database
    from memstrata.runtime import Memstrata

app = typer.Typer(
    help="Layered, per-user memory for AI agents.",
    no_args_is_help=True,
    # Docstrings are wrapped at 100 columns; markdown mode joins a paragraph's lines.
    rich_markup_mode="markdown",
)

T = TypeVar("T")

logger = logging.getLogger(__name__)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(release_line())
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the release and the schema revision it needs, then exit.",
        ),
    ] = False,
) -> None:
    """Layered, per-user memory for AI agents."""


def fail(message: str, code: int = 1) -> NoReturn:
    print_error(message)
    raise typer.Exit(code)


def print_error(message: str) -> None:
    # One line, always: causes quoted from libraries (libpq's "\n\tIs the server running
    # …?") would break it, and scripts read the first line. A message may quote what an
    # agent wrote (a path in its sandbox, say): its control characters are made visible.
    typer.secho(f"error: {visible(' '.join(message.split()))}", fg=typer.colors.RED, err=True)


def load_settings(*, log_level: str | None = "WARNING", opens_database: bool = True) -> Settings:
    """Settings from the environment; a bad value is a one-line message naming the variable.

    Short commands log at ``log_level`` (WARNING: their INFO lines would bury what they
    print) unless the operator set ``MEMSTRATA_LOG_LEVEL``, in the environment or the .env
    file: an explicit level is what they asked for. Long-running services pass
    ``log_level=None`` and keep the configured level. Audit events log whatever the level
    (:mod:`memstrata.service_logging`).

    A command that opens no database (``opens_database=False``: ``memstrata token``,
    ``memstrata conflicts``) does not need a database URL in production; the others are
    refused here, before they start anything (an embedding server, say).
    """
    from pydantic import ValidationError

    from memstrata.config import Settings, unset_database_problem
    from memstrata.service_logging import configure_service_logging

    try:
        settings = Settings()
    except ValidationError as exc:  # InvalidSettingError, a value not JSON included
        fail(f"invalid configuration — {'; '.join(map(_problem, exc.errors()))}")
    problem = unset_database_problem(settings) if opens_database else None
    if problem is not None:
        fail(f"invalid configuration — {problem}")
    explicit = "log_level" in settings.model_fields_set
    configure_service_logging(settings, None if explicit else log_level)
    return settings


def _problem(error: ErrorDetails) -> str:
    """One setting's problem; a check across settings names its variables itself."""
    cause = error.get("ctx", {}).get("error")
    message = str(cause) if isinstance(cause, ValueError) else error["msg"]
    if error["type"] == "extra_forbidden":
        message = "not a key this setting takes; check its spelling (docs/CONFIGURATION.md)"
    if not error["loc"]:
        return message
    return f"{setting_variable(error['loc'])}: {message}{_hint(error)}"


# What a number setting's name says its unit is (its suffix), for a value that is no number.
_UNITS = {"_bytes": "bytes", "_s": "seconds", "_ms": "milliseconds", "_days": "days"}
# pydantic's error types of a value that is no number (inf and nan included), or out of
# the setting's range.
_NUMBER_ERRORS = ("int_parsing", "int_from_float", "float_parsing", "finite_number")
_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _hint(error: ErrorDetails) -> str:
    """What a setting takes, after pydantic's words: ``; true or false`` for a boolean;
    for a number that is no number or out of range, its unit, the range its field allows
    and its default as an example (``; a whole number of bytes, 1 or more, e.g. 262144``).
    The range is read from the field (``config*.py``), where it is declared once."""
    from memstrata.config import Settings

    name = str(error["loc"][0])
    field = Settings.model_fields.get(name)
    if field is None or len(error["loc"]) != 1:
        return ""
    if error["type"] == "bool_parsing":
        return "; true or false"
    if error["type"] not in _NUMBER_ERRORS + _RANGE_ERRORS:
        return ""
    unit = next((u for suffix, u in _UNITS.items() if name.endswith(suffix)), None)
    whole = int in (field.annotation, *get_args(field.annotation))  # int | None too
    kind = "a whole number" if whole else "a number"
    parts = [f"{kind} of {unit}" if unit else kind, _allowed_range(field.metadata)]
    if field.default is not None:
        parts.append(f"e.g. {field.default}")
    return "; " + ", ".join(part for part in parts if part)


def _allowed_range(constraints: list[object]) -> str:
    """``from 0 to 19``, ``1 or more``, ``more than 0``: a field's bounds in words ("" if
    it has none)."""
    bounds = {
        kind: getattr(c, kind)
        for c in constraints
        for kind in ("ge", "gt", "le", "lt")
        if hasattr(c, kind)
    }
    if "ge" in bounds and "le" in bounds:
        return f"from {bounds['ge']} to {bounds['le']}"
    words = {"ge": "{} or more", "gt": "more than {}", "le": "at most {}", "lt": "less than {}"}
    return " and ".join(words[kind].format(value) for kind, value in bounds.items())


@contextmanager
def open_database(settings: Settings, *, migrate: bool = True) -> Iterator[Database]:
    from memstrata.db.database import Database

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
    with guarded_spec(settings) as spec:
        if spec is None and require_embeddings:
            fail(
                "no embedding API configured — set MEMSTRATA_EMBEDDING_BASE_URL and "
                "MEMSTRATA_EMBEDDING_MODEL, or enable MEMSTRATA_EMBEDDING_AUTOSTART"
            )
        with runtime_for(settings, spec) as mem:
            yield mem


@contextmanager
def runtime_for(settings: Settings, spec: EmbeddingModelSpec | None) -> Iterator[Memstrata]:
    """:func:`open_memstrata` for one command: a runtime that cannot open is the CLI's
    one-line error, and the runtime is closed when the command ends."""
    try:
        mem = open_memstrata(settings, spec)
    except MemstrataError as exc:
        fail(str(exc))
    try:
        yield mem
    finally:
        mem.close()


def open_memstrata(settings: Settings, spec: EmbeddingModelSpec | None) -> Memstrata:
    """The runtime with the model ``guarded_spec`` resolved; ``None`` is BM25-only search,
    not a second look at the settings (which logged "no embedding API" a second time)."""
    from memstrata.runtime import Memstrata

    if spec is None:
        return Memstrata.open(settings, embedder=None)
    return Memstrata.open(settings, embedding_spec=spec)


@contextmanager
def guarded_spec(settings: Settings) -> Iterator[EmbeddingModelSpec | None]:
    """``embedding_spec``, with a half-configured embedding API as a one-line error."""
    from memstrata.retrieval.autostart import embedding_spec

    with ExitStack() as stack:
        try:
            spec = stack.enter_context(embedding_spec(settings))
        except MemstrataError as exc:
            fail(str(exc))
        yield spec


def guarded(fn: Callable[[], T]) -> T:
    """Turn domain errors into a one-line CLI message and exit status 1. A lost database
    that is a domain error too (``db.in_flight``'s, worded for an HTTP client) is left to
    the command's answer to database failures (``cli.db_failure``)."""
    from memstrata.cli.db_failure import database_error

    try:
        return fn()
    except MemstrataError as exc:
        if database_error(exc):
            raise
        fail(str(exc))
