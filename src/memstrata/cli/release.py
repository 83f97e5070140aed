"""The release line of ``--version`` and the serve banner, e.g. ``memstrata 0.1.0 (schema 0011)``.

The schema revision is read from the migration files' ``revision`` and ``down_revision``
lines: asking Alembic (``memstrata.db.migrate.schema_head``) imports Alembic, SQLAlchemy
and every migration script, most of the CPU time ``memstrata --version`` took. Alembic
still decides whenever the files are not a plain chain of string revisions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import memstrata.db
from memstrata import package_version

# Where Alembic's ``script_location`` (memstrata.db.migrate) keeps the migrations.
VERSIONS_DIR = Path(memstrata.db.__file__).parent / "alembic" / "versions"

# ``revision = "0010"`` or, as newer Alembic templates write it, ``revision: str = "0010"``.
_ASSIGNMENT = re.compile(r"^(revision|down_revision)\b[^=\n]*=\s*(.+?)\s*$", re.MULTILINE)


def release_line() -> str:
    """This release and the schema revision it needs."""
    return f"memstrata {package_version()} (schema {schema_revision()})"


def schema_revision() -> str | None:
    head = migration_head(VERSIONS_DIR)
    if head is not None:
        return head
    from memstrata.db.migrate import schema_head

    return schema_head()


def migration_head(versions: Path) -> str | None:
    """The one revision no migration in ``versions`` revises; None when that is not plain
    to see from the files (a merge or a branch, a revision that is not a string literal,
    no migrations), so that Alembic is asked."""
    revisions: set[str] = set()
    revised: set[str] = set()
    try:
        for path in versions.glob("*.py"):
            values = dict(_ASSIGNMENT.findall(path.read_text(encoding="utf-8")))
            revision = _revision(values.get("revision"), first=False)
            down = _revision(values.get("down_revision"), first=True)
            if revision is None:
                return None
            revisions.add(revision)
            if down is not None:
                revised.add(down)
    except _NotPlain:
        return None
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 and revised <= revisions else None


class _NotPlain(Exception):
    """A revision value other than a string literal (or ``None`` for the first one)."""


def _revision(source: str | None, *, first: bool) -> str | None:
    try:
        value = ast.literal_eval(source) if source is not None else None
    except (ValueError, SyntaxError):
        raise _NotPlain from None
    if isinstance(value, str) or (value is None and first):
        return value
    raise _NotPlain
