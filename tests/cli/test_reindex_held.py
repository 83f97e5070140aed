"""`memstrata reindex` and a running server's worker follow one rule of which rows a claim
holds (``queue.UNCLAIMED``): reindex leaves the worker's rows alone until their lease runs
out, then takes them over, and the worker leaves alone the batch reindex is embedding."""

from __future__ import annotations

from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import queue
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.repository import EmbeddingRepository
from tests.cli.cli_env import run_cli
from tests.cli.test_reindex_backlog import env  # noqa: F401  (the fixture: one environment)


def store_without_vectors(db: Database, n: int) -> None:
    indexer = Indexer(db.sessions, None)  # stored without a vector, as during an outage
    for i in range(n):
        indexer.index_turn("u", "s", i, f"the {i}th thing I said", "")


def lease(db: Database, seconds: float, rows: int, skip: int = 0) -> None:
    """A claim of a worker on ``rows`` rows after the ``skip`` oldest, ending in
    ``seconds`` (negative: it ran out)."""
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE memory_embeddings SET embedding_claimed_until = now() + "
                "make_interval(secs => :s) WHERE id IN (SELECT id FROM memory_embeddings "
                "ORDER BY id LIMIT :n OFFSET :skip)"
            ),
            {"s": seconds, "n": rows, "skip": skip},
        )


def vectorless(db: Database) -> int:
    with db.engine.connect() as conn:
        query = "SELECT count(*) FROM memory_embeddings WHERE embedding IS NULL"
        return int(conn.execute(text(query)).scalar_one())


def test_reindex_takes_over_a_claim_whose_lease_ran_out(
    env: None,  # noqa: F811
    db: Database,
) -> None:
    store_without_vectors(db, 3)
    lease(db, -1, rows=2)  # a worker that died mid-batch, its lease over a second ago
    code, out, err = run_cli("reindex", "--user", "u", "--wait", "0")
    assert code == 0, out + err
    assert "held" not in err
    assert out.splitlines()[-1] == "re-indexed 0 memory file(s) and embedded 3 chunk(s) for u"
    assert vectorless(db) == 0


def test_the_wait_takes_over_a_lease_that_runs_out_and_leaves_a_live_one(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    store_without_vectors(db, 3)
    lease(db, 3, rows=1)  # runs out during the wait
    lease(db, 3600, rows=1, skip=1)  # a worker still embedding it
    seen: list[int] = []

    done = Indexer(db.sessions, embedder).fill_missing(
        "u", wait_s=8, waiting=lambda held, _left: seen.append(held)
    )

    assert done == 2
    assert seen[0] == 2 and seen[-1] == 1  # waited for both, then for the live one alone
    with db.engine.connect() as conn:
        (held,) = conn.execute(
            text("SELECT file_path FROM memory_embeddings WHERE embedding IS NULL")
        ).scalars()
    assert held == "sessions/s/1"  # the live claim's row, left to its worker


def test_a_worker_does_not_claim_the_batch_reindex_is_embedding(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    store_without_vectors(db, 3)
    with transaction(db.sessions) as session:
        batch, until = EmbeddingRepository(session, "u").claim_missing(embedder.name, 2, 60)
    assert until is not None and [c.chunk_index for c in batch] == [0, 0]
    with transaction(db.sessions) as session:  # the worker's own claim
        claimed = queue.claim(session, embedder.name, 10, lease_s=120)
    assert {c.id for c in claimed}.isdisjoint(c.id for c in batch) and len(claimed) == 1
    with transaction(db.sessions) as session:  # what reindex gives back when the API failed
        EmbeddingRepository(session, "u").release_lease([c.id for c in batch], until)
        assert EmbeddingRepository(session, "u").count_held(embedder.name) == 1  # the worker's
