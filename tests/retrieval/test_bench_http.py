"""``ingest_rates`` (``memstrata bench http``, ``benchmarks/ingest_rate.py``) against a real
``memstrata serve``: both endpoints must store the very same turns, or the ratio compares
different amounts of text."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from memstrata.bench.http_common import SECRET
from memstrata.bench.http_latency import ingest_rates
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.serve_process import running_serve


def _serve_env(data: Path, pg_url: str, **extra: str) -> dict[str, str]:
    """``memstrata serve`` on the test database; no local embedding server of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data),
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_JWT_SECRET=SECRET,
        MEMSTRATA_LOG_LEVEL="WARNING",
        MEMSTRATA_EMBEDDING_AUTOSTART="false",
        **extra,
    )
    return env


@pytest.fixture(scope="module")
def bm25_serve(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[str]:
    env = _serve_env(tmp_path_factory.mktemp("bench-http-serve"), pg_url)
    with running_serve(env, timeout_s=60) as url:
        yield url


def _rows(db: Database, user: str) -> list[tuple[str, str, str]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT file_path, chunk_text, created_at::text FROM memory_embeddings "
                "WHERE user_id = :u ORDER BY file_path, chunk_index"
            ),
            {"u": user},
        ).all()
    return [(r[0], r[1], r[2]) for r in rows]


def test_both_endpoints_ingest_the_same_turns(bm25_serve: str, db: Database) -> None:
    turns = [f"turn {n}: " + "word " * (n % 7 + 1) for n in range(45)]
    with httpx.Client(timeout=60, trust_env=False) as client:
        rates = ingest_rates(client, bm25_serve, turns, n=30)
    assert rates["turns"] == 30
    assert rates["single_turns_per_s"] > 0 and rates["batch_turns_per_s"] > 0
    single, batch = _rows(db, "ingest-single"), _rows(db, "ingest-batch")
    assert len(single) == 30  # two sessions of 20 and 10 turns, one row each
    assert single == batch


def test_ingest_rates_refuses_what_it_cannot_measure(bm25_serve: str) -> None:
    with httpx.Client(timeout=10, trust_env=False) as client:
        with pytest.raises(ValueError, match="at least one turn"):
            ingest_rates(client, bm25_serve, [])
        with pytest.raises(ValueError, match="n <= 500"):
            ingest_rates(client, bm25_serve, ["a turn"], n=501)


def test_a_background_import_is_timed_until_its_last_vector(
    tmp_path: Path, pg_url: str, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    """With an embedding API the same turns also go through ``embed: background``; the
    figure counts until the worker has embedded every row, which must then hold the same
    texts as the inline batch, all with vectors."""
    env = _serve_env(
        tmp_path,
        pg_url,
        MEMSTRATA_EMBEDDING_BASE_URL=embedding_server.base_url,
        MEMSTRATA_EMBEDDING_MODEL=embedding_server.model_spec.name,
    )
    turns = [f"turn {n}: " + "word " * (n % 7 + 1) for n in range(12)]
    with running_serve(env, timeout_s=60) as url, httpx.Client(timeout=60) as client:
        rates = ingest_rates(client, url, turns, n=12)
    assert rates["background_turns_per_s"] > 0
    assert 0 < rates["background_all_vectors_turns_per_s"] <= rates["background_turns_per_s"]
    assert _rows(db, "ingest-background") == _rows(db, "ingest-batch")
    with db.engine.connect() as conn:
        missing = conn.execute(
            text("SELECT count(*) FROM memory_embeddings WHERE embedding IS NULL")
        ).scalar_one()
    assert missing == 0


def test_an_inline_batch_cut_by_its_budget_is_timed_until_its_last_vector(
    tmp_path: Path, pg_url: str, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    """A budget too small for the batch leaves turns to the worker: its answer's rate is
    then not the rate at which its vectors came, which is timed apart, before the
    background import starts (whose figure would otherwise include them)."""
    env = _serve_env(
        tmp_path,
        pg_url,
        MEMSTRATA_EMBEDDING_BASE_URL=embedding_server.base_url,
        MEMSTRATA_EMBEDDING_MODEL=embedding_server.model_spec.name,
        MEMSTRATA_EMBEDDING_FILE_BUDGET_S="0.001",  # gone before the second request
    )
    turns = [f"turn {n}: " + "word " * (n % 7 + 1) for n in range(12)]
    with running_serve(env, timeout_s=60) as url, httpx.Client(timeout=60) as client:
        rates = ingest_rates(client, url, turns, n=12)
    assert rates["batch_deferred"] >= 4, rates  # at most the first request was sent
    assert 0 < rates["batch_all_vectors_turns_per_s"] <= rates["batch_turns_per_s"]
    assert _rows(db, "ingest-batch") == _rows(db, "ingest-single")
