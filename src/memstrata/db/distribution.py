"""Distribution by ``user_id`` (Citus and similar): what the schema promises.

Every table that holds user data is keyed by ``user_id``; each statement the services run
on one of them names one user (an ``INSERT`` carries it, every other statement filters on
``user_id = :value``), so on a sharded cluster each statement is routed to one shard. A
test captures the SQL of the store, search, indexing, sync and skills paths and enforces
this; ``docs/SCALING.md`` builds on it.

Statements that must span users (maintenance: a work queue, global metrics) are the only
exceptions. Each carries the SQL comment ``/* memstrata:cross-user:<name> */`` and its
name is listed in :data:`CROSS_USER_QUERIES` with the reason — a statement without a
listed tag that touches a per-user table without a user filter fails the test.
"""

from __future__ import annotations

from pathlib import Path

DISTRIBUTION_COLUMN = "user_id"

PER_USER_TABLES: tuple[str, ...] = (
    "user_memory",
    "memory_embeddings",
    "user_skill_configs",
    "memory_index_state",
    "memory_index_snapshots",
    "sandbox_synced",
)

# Tables with no user data (never distributed; Citus: local or reference tables).
UNDISTRIBUTED_TABLES: tuple[str, ...] = (
    "alembic_version",
    "embedding_models",
    "memory_template_paragraphs",
)

CROSS_USER_TAG = "memstrata:cross-user:"

# name -> why it must span users. Tag the statement with ``/* memstrata:cross-user:NAME */``.
CROSS_USER_QUERIES: dict[str, str] = {
    "embedding_queue.claim": "lease the claimed rows of any users by id (each user's rows "
    "are picked with FOR UPDATE SKIP LOCKED per user), so every replica shares the "
    "re-embedding work (retrieval.queue); and take back, before a claim, the claims of any "
    "users' rows whose worker is gone (its advisory lock ended: retrieval.claimer.reclaim)",
    "embedding_queue.users": "which users have rows waiting for a vector, so a claim gives "
    "each a share and one user's large backlog does not hold up another's (retrieval.queue)",
    "embedding_queue.release": "give claimed rows back by id after an API failure "
    "(retrieval.claim_outcome), and a stopping worker's rows of any users by its token "
    "(retrieval.claimer.give_back)",
    "embedding_queue.record_failures": "count a failed attempt / mark a row unembeddable, by id",
    "embedding_queue.backlog": "pending rows, oldest age and failures of all users, for "
    "/metrics and /readyz",
    "index_snapshots.missing": "which users have enough conversation rows outside any index "
    "snapshot to be worth one, for `memstrata snapshots` and the pass `memstrata serve` makes "
    "after it starts (maintenance after an upgrade or after a database crash emptied the "
    "UNLOGGED snapshot table; retrieval.backfill)",
    "restore.lift": "lift every file's version, sandbox note and index generation at once "
    "after a restore, so no value held from before it matches again (`memstrata db "
    "restored`, db.restored)",
}

# The SQL that turns the spec's ``id`` primary keys into (user_id, id).
KEY_CHANGE_SQL = Path(__file__).parent / "sql" / "citus_keys.sql"


def cross_user_tag(name: str) -> str:
    """The comment to put in a listed cross-user statement."""
    if name not in CROSS_USER_QUERIES:
        raise KeyError(f"{name!r} is not in CROSS_USER_QUERIES; list it with its reason")
    return f"/* {CROSS_USER_TAG}{name} */"
