"""Whether the database holds the schema its recorded revision promises.

``alembic_version`` records which migrations ran, not that their objects are still there.
A ``pg_restore`` run by a role that may not create the pgvector extension skips
``memory_embeddings`` and everything on it, yet restores ``alembic_version``: ``memstrata db
status`` said ``up_to_date`` and ``memstrata serve`` started on a database without its
search rows (every index write failed). What the head revision brings is read from the
models' metadata (``Base.metadata``: tables, columns, named indexes and unique constraints,
primary keys, and the pgvector extension its vector column needs), so the migrations and
the models stay the one definition; one catalog query, readable by any role, says what the
database has.
"""

from __future__ import annotations

from typing import NamedTuple

from pgvector.sqlalchemy import Vector
from sqlalchemy import Engine, MetaData, UniqueConstraint, text

from memstrata.db.engine import describe
from memstrata.db.models import Base
from memstrata.errors import DatabaseSetupError

# At most this many missing objects are named in the one-line message.
SHOWN_MISSING = 6

# Every object of the given tables (resolved on the search path, as memstrata's queries
# resolve them) and every extension. Catalogs only: no privilege on the tables is needed.
_FOUND_OBJECTS = text(
    """
    SELECT 'table', t.name, t.name
    FROM unnest(CAST(:tables AS text[])) AS t(name)
    WHERE to_regclass(t.name) IS NOT NULL
    UNION ALL
    SELECT 'column', t.name, a.attname
    FROM unnest(CAST(:tables AS text[])) AS t(name)
    JOIN pg_attribute a ON a.attrelid = to_regclass(t.name) AND a.attnum > 0
      AND NOT a.attisdropped
    UNION ALL
    SELECT CASE WHEN i.indisprimary THEN 'primary key' ELSE 'index' END, t.name,
           CASE WHEN i.indisprimary THEN t.name ELSE c.relname END
    FROM unnest(CAST(:tables AS text[])) AS t(name)
    JOIN pg_index i ON i.indrelid = to_regclass(t.name)
    JOIN pg_class c ON c.oid = i.indexrelid
    UNION ALL
    SELECT 'extension', '', extname FROM pg_extension
    """
)


class SchemaObject(NamedTuple):
    """One thing the schema must have: ``kind`` is ``table``, ``column``, ``index``,
    ``primary key`` or ``extension``; ``table`` is ``""`` for an extension."""

    kind: str
    table: str
    name: str

    def __str__(self) -> str:
        if self.kind == "column":
            return f"column {self.table}.{self.name}"
        if self.kind == "primary key":
            return f"the primary key of {self.table}"
        return f"{self.kind} {self.name}"


def expected_objects(metadata: MetaData = Base.metadata) -> frozenset[SchemaObject]:
    """What the models describe, hence what the head revision's migrations create."""
    wanted: set[SchemaObject] = set()
    for table in metadata.tables.values():
        wanted.add(SchemaObject("table", table.name, table.name))
        for column in table.columns:
            wanted.add(SchemaObject("column", table.name, column.name))
            if isinstance(column.type, Vector):
                wanted.add(SchemaObject("extension", "", "vector"))
        if table.primary_key.columns:
            wanted.add(SchemaObject("primary key", table.name, table.name))
        for index in table.indexes:
            wanted.add(SchemaObject("index", table.name, str(index.name)))
        for constraint in table.constraints:
            if isinstance(constraint, UniqueConstraint) and constraint.name:
                wanted.add(SchemaObject("index", table.name, str(constraint.name)))
    return frozenset(wanted)


def missing_objects(
    expected: frozenset[SchemaObject], found: frozenset[SchemaObject]
) -> list[SchemaObject]:
    """``expected`` less ``found``, sorted: the extension, then tables, then the rest; a
    missing table stands for its columns and indexes, which are not listed again."""
    missing = expected - found
    gone_tables = {o.table for o in missing if o.kind == "table"}
    shown = [o for o in missing if o.kind in ("table", "extension") or o.table not in gone_tables]
    order = {"extension": 0, "table": 1, "column": 2, "primary key": 3, "index": 4}
    return sorted(shown, key=lambda o: (order[o.kind], o.table, o.name))


def found_objects(engine: Engine, tables: list[str]) -> frozenset[SchemaObject]:
    with engine.connect() as conn:
        rows = conn.execute(_FOUND_OBJECTS, {"tables": tables}).all()
    return frozenset(SchemaObject(kind, table, name) for kind, table, name in rows)


def schema_gaps(engine: Engine) -> list[SchemaObject]:
    """What the head revision's schema has and this database lacks (empty: complete)."""
    expected = expected_objects()
    tables = sorted({o.table for o in expected if o.kind == "table"})
    return missing_objects(expected, found_objects(engine, tables))


def incomplete_message(engine: Engine, revision: str | None, missing: list[SchemaObject]) -> str:
    """The one line naming what is missing and the fix that works."""
    names = [str(o) for o in missing[:SHOWN_MISSING]]
    if len(missing) > SHOWN_MISSING:
        names.append(f"{len(missing) - SHOWN_MISSING} more")
    return (
        f"the schema on {describe(engine)} is incomplete: it records revision {revision} "
        f"but lacks {', '.join(names)} — a restore that skipped them (pg_restore by a role "
        "that may not create the pgvector extension); `memstrata db upgrade` cannot add "
        "them at a recorded revision: restore the backup again into a new, empty database "
        "in which a superuser first ran `CREATE EXTENSION vector;` (or restore as a "
        "superuser), and check that pg_restore exits with status 0"
    )


def check_complete(engine: Engine, revision: str | None) -> None:
    """``DatabaseSetupError`` naming what is missing unless the schema is complete."""
    missing = schema_gaps(engine)
    if missing:
        raise DatabaseSetupError(incomplete_message(engine, revision, missing))
