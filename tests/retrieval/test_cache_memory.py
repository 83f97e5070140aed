"""The search cache's byte budget counts resident memory, trims the allocator after big
loads and evictions, and holds the query-embedding cache's share.

Rows go through the real repository into the real database (random 384-d unit vectors:
memory depends on sizes, not meaning). The resident-memory check runs in a fresh Python
process that reads its own ``/proc/self/status``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.retrieval import cache as cache_module
from memstrata.retrieval.cache import IndexCache, query_share, trim_allocator, trim_due
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.query_cache import CachedQueryEmbedder

from .test_cache_budget import MODEL, _write

GLIBC = trim_allocator()  # also checks that a trim runs here at all

# A fresh process: one user's index loaded, garbage collected and the allocator trimmed
# (what the cache does after a big load); its RSS above the process's own before the
# load, against what the cache charged.
_CHILD = textwrap.dedent(
    """
    import gc, json, sys
    from pathlib import Path
    from memstrata.config import Settings
    from memstrata.db.database import Database
    from memstrata.retrieval.cache import IndexCache, trim_allocator

    def rss_kib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    url, data_dir, user, small, model = sys.argv[1:]
    db = Database.open(Settings(environment="test", database_url=url, data_dir=data_dir))
    IndexCache(db.sessions).get(small, model)  # the loader's first use is not the cache's
    gc.collect()
    trim_allocator()
    before = rss_kib()
    cache = IndexCache(db.sessions, trim_after_bytes=None)
    index = cache.get(user, model)
    gc.collect()
    trim_allocator()
    held = (rss_kib() - before) * 1024
    print(json.dumps({"held": held, "charged": cache.stats().bytes,
                      "estimate": index.approx_bytes(), "rows": len(index.rows),
                      "postings": index.bm25.posting_count(), "terms": index.bm25.term_count(),
                      "vectors": index.vectors.nbytes(), "texts": index._text_bytes}))
    db.close()
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_charge_covers_the_resident_memory_of_an_index(
    db: Database, pg_url: str, tmp_path: object
) -> None:
    for part in range(4):  # 3,000 rows, written in parts as a history grows
        _write(db, "big", 750, 11, first=750 * part)
    _write(db, "small", 5, 12)
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, pg_url, str(tmp_path), "big", "small", MODEL],
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(run.stdout.splitlines()[-1])
    # The charge is the index's own estimate, and covers what the process holds.
    assert figures["held"] <= figures["charged"] == figures["estimate"], figures


@pytest.mark.parametrize(("user", "rows"), [("user0", 40), ("nobody", 0)])
def test_the_charge_is_the_indexs_estimate_with_the_measured_figures(
    db: Database, user: str, rows: int
) -> None:
    """What the budget counts for an index: its one estimate, with the figures fitted to
    the RSS measured (docs/BENCHMARKS.md, "Search cache memory (RSS vs estimate)") — per
    row 200 bytes of heap + 2,048 of kept garbage, per posting 90 + 56, per term 250, per
    index 2 KiB, the texts and the vector matrix as they are."""
    if rows:
        _write(db, user, rows, 0)
    cache = IndexCache(db.sessions)
    index = cache.get(user, MODEL)
    assert len(index.rows) == rows
    texts = sum(sys.getsizeof(r.text) for r in index.rows.values())
    vectors = index.vectors.nbytes() if index.vectors is not None else 0
    expected = (
        2048
        + texts
        + vectors
        + (200 + 2048) * rows
        + (90 + 56) * index.bm25.posting_count()
        + 250 * index.bm25.term_count()
    )
    assert cache.stats().bytes == expected
    assert index.approx_bytes() == expected


def test_trim_is_due_once_enough_bytes_moved() -> None:
    assert not trim_due(10, None)
    assert not trim_due(0, 0)  # nothing moved: nothing to return
    assert not trim_due(10, 11)
    assert trim_due(11, 11) and trim_due(12, 11)


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_loads_and_evictions_that_move_enough_trim_the_allocator(db: Database) -> None:
    for u in range(3):
        _write(db, f"user{u}", 40, u)
    one = IndexCache(db.sessions)
    one.get("user0", MODEL)
    size = one.stats().bytes
    # A load of one user moves its charge; an eviction frees another's.
    cache = IndexCache(db.sessions, max_users=1, trim_after_bytes=size * 2 - 1)
    cache.get("user0", MODEL)
    assert cache.stats().trims == 0  # one load's worth: not yet
    cache.get("user1", MODEL)  # a load and an eviction: three users' worth
    stats = cache.stats()
    assert (stats.trims, stats.evictions) == (1, 1) and stats.trim_seconds > 0
    cache.get("user1", MODEL)  # a hit moves nothing
    assert cache.stats().trims == 1
    never = IndexCache(db.sessions, max_users=1, trim_after_bytes=None)
    for u in range(3):
        never.get(f"user{u}", MODEL)
    assert never.stats().trims == 0


def test_the_query_cache_takes_its_share_of_the_budget(
    db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    for u in range(2):
        _write(db, f"user{u}", 40, u)
    one = IndexCache(db.sessions)
    one.get("user0", MODEL)
    # Two users fit in the whole budget, but not in what the query cache leaves of it.
    budget = int(one.stats().bytes * 2 * (1 + cache_module.QUERY_CACHE_SHARE / 2))
    queries = CachedQueryEmbedder(OpenAICompatibleEmbedder(embedding_server.model_spec))
    cache = IndexCache(db.sessions, max_bytes=budget)
    cache.share_budget(queries)
    assert queries.max_bytes == query_share(budget) == int(budget * cache_module.QUERY_CACHE_SHARE)
    for u in range(2):
        cache.get(f"user{u}", MODEL)
    stats = cache.stats()
    assert (stats.users, stats.evictions) == (1, 1)
    queries.embed_for("user1", ["where is my dog?"], "query")
    shown = cache.stats().queries
    assert shown is not None and shown.entries == 1
    assert 0 < shown.bytes <= shown.max_bytes == queries.max_bytes
    # Without the share both stay.
    alone = IndexCache(db.sessions, max_bytes=budget)
    for u in range(2):
        alone.get(f"user{u}", MODEL)
    assert alone.stats().users == 2 and alone.stats().queries is None
    alone.share_budget(None)  # no embedder (BM25 only): nothing to bound
    assert alone.stats().queries is None


def test_the_default_user_cap_leaves_the_budget_to_bind(db: Database) -> None:
    """For users with vectors the byte budget binds before the default user cap: a
    user of the mean size (65 rows, docs/SCALING.md) and one of a single row."""
    fields = Settings.model_fields
    cap, budget = fields["search_cache_users"].default, fields["search_cache_bytes"].default
    _write(db, "mean", 65, 1)
    _write(db, "single", 1, 2)
    cache = IndexCache(db.sessions)
    for user in ("mean", "single"):
        cache.get(user, MODEL)
        assert cache._sizes[(user, MODEL)] * cap > budget - (query_share(budget) or 0)
