"""The schema and the SQL the services run are ready to be distributed by ``user_id``.

1. Every table is classified; per-user tables have ``user_id``, every unique constraint
   and index includes it, no foreign key exists (none can cross users).
2. The SQL of the store, indexing, search (both vector backends), sync, agent tools and
   skills paths is captured with SQLAlchemy's ``before_cursor_execute`` hook: every
   statement on a per-user table inserts ``user_id`` or filters ``user_id = :value``,
   unless it carries a cross-user tag listed in ``CROSS_USER_QUERIES``.
3. The key-change SQL (primary keys → (user_id, id)) is applied to a scratch database and
   the same services run on it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, inspect
from sqlalchemy.engine import Connection

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.distribution import (
    CROSS_USER_QUERIES,
    CROSS_USER_TAG,
    DISTRIBUTION_COLUMN,
    KEY_CHANGE_SQL,
    PER_USER_TABLES,
    UNDISTRIBUTED_TABLES,
    cross_user_tag,
)
from memstrata.errors import UnknownSkillError, VersionConflictError
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.search import SearchService
from memstrata.runtime import Memstrata

from .conftest import ScratchFactory

_TABLE = re.compile(r"\b(" + "|".join(PER_USER_TABLES) + r")\b")
_USER_FILTER = re.compile(r"\bWHERE\b.*\buser_id\s*=\s*(%\(\w+\)s|ANY)", re.DOTALL | re.I)
_INSERT = re.compile(r"^\s*INSERT INTO (\w+)\s*\(([^)]*)\)", re.I)
_TAG = re.compile(re.escape(CROSS_USER_TAG) + r"([\w.-]+)")


# -- 1. the schema -------------------------------------------------------------------------


def test_every_table_is_classified_and_keyed_by_user(db: Database) -> None:
    inspector = inspect(db.engine)
    tables = set(inspector.get_table_names())
    unknown = tables - set(PER_USER_TABLES) - set(UNDISTRIBUTED_TABLES)
    assert not unknown, f"classify these tables in memstrata.db.distribution: {unknown}"
    assert set(PER_USER_TABLES) <= tables
    key_change = KEY_CHANGE_SQL.read_text()
    for table in PER_USER_TABLES:
        columns = {c["name"]: c for c in inspector.get_columns(table)}
        assert not columns[DISTRIBUTION_COLUMN]["nullable"], table
        assert inspector.get_foreign_keys(table) == [], f"{table}: a foreign key"
        for unique in inspector.get_unique_constraints(table):
            assert DISTRIBUTION_COLUMN in unique["column_names"], (table, unique)
        for index in inspector.get_indexes(table):
            if index["unique"]:
                assert DISTRIBUTION_COLUMN in index["column_names"], (table, index)
        primary = inspector.get_pk_constraint(table)["constrained_columns"]
        if DISTRIBUTION_COLUMN not in primary:
            assert primary == ["id"], table  # the spec's key; the key-change SQL covers it
            assert f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey" in key_change


# -- 2. the SQL the services run -------------------------------------------------------------


@pytest.fixture
def captured(db: Database) -> Iterator[list[str]]:
    statements: list[str] = []

    def capture(_c: Connection, _cur: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", capture)
    yield statements
    event.remove(db.engine, "before_cursor_execute", capture)


def _violations(statements: list[str]) -> list[str]:
    bad = []
    for sql in statements:
        if not _TABLE.search(sql):
            continue
        tag = _TAG.search(sql)
        if tag is not None:
            if tag.group(1) not in CROSS_USER_QUERIES:
                bad.append(f"unlisted cross-user tag {tag.group(1)!r}: {sql}")
            continue
        insert = _INSERT.match(sql)
        if insert is not None:
            columns = [c.strip() for c in insert.group(2).split(",")]
            if DISTRIBUTION_COLUMN not in columns:
                bad.append(f"insert without user_id: {sql}")
            continue
        if not _USER_FILTER.search(sql):
            bad.append(f"no user_id filter: {sql}")
    return bad


def run_workload(mem: Memstrata, user: str = "alice") -> set[str]:
    """Store, indexing, both search backends, sync, agent tools and skills for one user;
    returns the per-user tables the workload read or wrote (checked by the caller)."""
    store = mem.store
    store.provision_default_files(user)
    current = store.get_memory_file(user, "user")
    assert current is not None
    store.upsert_memory_file(user, "user", "# USER.md\n- Keeps bees", current.version)
    with pytest.raises(VersionConflictError):
        store.upsert_memory_file(user, "user", "stale", current.version)
    store.upsert_memory_file(user, "soul", "# SOUL.md\nCalm.")
    assert len(store.list_memory_files(user)) == 3

    when = datetime(2026, 11, 1, tzinfo=UTC)
    mem.indexer.index_turn(user, "s1", 0, "The hive is behind the orchard.", "Nice.", when)
    mem.indexer.index_turn(user, "s1", 1, "Queen bee arrived today.", "Great!", when)
    mem.indexer.index_turn(user, "s1", 0, "The hive moved to the roof.", "Noted.", when)
    mem.indexer.index_document(user, "memory/2026-11-01.md", "Harvested 4 kg of honey.")
    mem.indexer.fill_missing(user)
    assert mem.search.search(user, "where is the hive", top_k=3).hits
    pgvector = SearchService(IndexCache(mem.db.sessions), mem.embedder, vector_backend="pgvector")
    assert pgvector.search(user, "honey harvest", top_k=3).hits

    async def agent() -> None:
        await mem.sync.frontend_edit(user, "memory", "# MEMORY.md\n- Bees: 2 hives")
        session = await mem.open_agent_session(user, token_limit=8000, session_id="s2")
        await session.tools.call("record_memory", {"content": "Ordered a third hive"})
        await session.tools.call("memory_search", {"query": "hive"})
        await session.end_round()
        session.close()

    asyncio.run(agent())

    skills = mem.skills.list_for_user(user)
    mem.skills.set_enabled(user, skills[0].name, False)
    with pytest.raises(UnknownSkillError):
        mem.skills.set_enabled(user, "no-such-skill", True)
    assert not mem.skills.list_for_user(user)[0].enabled
    return set(PER_USER_TABLES)


def test_every_statement_on_user_data_names_one_user(
    db: Database,
    settings: Settings,
    embedding_server: LocalEmbeddingServer,
    captured: list[str],
) -> None:
    mem = Memstrata.open(settings, database=db, embedding_spec=embedding_server.model_spec)
    try:
        run_workload(mem)
    finally:
        mem.pool.close()
    touched = {m.group(1) for sql in captured for m in _TABLE.finditer(sql)}
    assert touched == set(PER_USER_TABLES), "the workload must exercise every per-user table"
    assert len(captured) > 40
    assert _violations(captured) == []


def test_the_checker_catches_a_cross_user_statement() -> None:
    assert _violations(["SELECT count(*) FROM memory_embeddings"])
    assert _violations(["DELETE FROM user_memory WHERE version = %(v)s"])
    assert _violations(["INSERT INTO user_skill_configs (skill_name) VALUES (%(s)s)"])
    assert _violations(["SELECT 1 FROM memory_embeddings /* memstrata:cross-user:nope */"])
    assert not _violations(["SELECT id FROM memory_embeddings WHERE user_id = %(u)s"])
    with pytest.raises(KeyError, match="CROSS_USER_QUERIES"):
        cross_user_tag("nope")
    for name in CROSS_USER_QUERIES:  # every listed tag is usable and recognised
        assert not _violations([f"SELECT count(*) FROM memory_embeddings {cross_user_tag(name)}"])


# -- 3. the key change, applied ----------------------------------------------------------------


def _apply_key_change(engine: Engine) -> None:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(KEY_CHANGE_SQL.read_text())
        raw.commit()
    finally:
        raw.close()


def test_key_change_sql_then_the_services_run(
    scratch_database: ScratchFactory,
    tmp_path: Path,
    embedding_server: LocalEmbeddingServer,
) -> None:
    url = scratch_database("citus_keys")
    settings = Settings(
        environment="test", database_url=url, data_dir=tmp_path, sandbox_root=tmp_path / "sb"
    )
    mem = Memstrata.open(settings, embedding_spec=embedding_server.model_spec)
    try:
        _apply_key_change(mem.db.engine)
        inspector = inspect(mem.db.engine)
        for table in PER_USER_TABLES:
            primary = inspector.get_pk_constraint(table)["constrained_columns"]
            assert DISTRIBUTION_COLUMN in primary, (table, primary)
            assert primary in (
                ["user_id"],
                ["user_id", "id"],
                ["user_id", "model"],
                ["user_id", "root", "sandbox", "file_type"],
            ), (
                table,
                primary,
            )
        run_workload(mem, "alice")
        run_workload(mem, "bob")
        hits = mem.search.search("bob", "hive", top_k=5).hits
        assert hits and "hive" in hits[0].text
    finally:
        mem.close()


def test_scaling_doc_quotes_the_key_change_sql() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "SCALING.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sql\n(.*?)```", doc, re.S)
    assert KEY_CHANGE_SQL.read_text() in blocks, "docs/SCALING.md must quote citus_keys.sql"
