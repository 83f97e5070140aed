"""A running fill (``memstrata reindex``) claims as a worker does: each batch records the
token of an advisory lock the fill holds while it runs, so a worker's take-back
(``claimer.reclaim``) leaves a live fill's batch alone, and the lock ends with the fill.
The fill's slow API is the fault-injection fake: it keeps a batch in flight long enough
to look at it."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import claimer
from memstrata.retrieval.indexer import Indexer
from tests.cli.test_reindex_held import store_without_vectors, vectorless
from tests.retrieval.fault_embedder import fault_embedder
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

BATCH = 4
DELAY_S = 0.5  # per text: each batch is in flight for 2 s


def _claims(db: Database) -> list[int | None]:
    """The token of each row claimed now."""
    with db.engine.connect() as conn:
        query = (
            "SELECT embedding_claimed_by FROM memory_embeddings "
            "WHERE embedding_claimed_until > now() ORDER BY id"
        )
        return list(conn.execute(text(query)).scalars())


def _live(db: Database) -> set[int]:
    with db.engine.connect() as conn:
        found = conn.execute(text(claimer.LIVE_CLAIMERS), {"cls": claimer.LOCK_CLASS})
        return set(found.scalars())


def test_a_running_fill_holds_its_batch_under_a_live_token(db: Database) -> None:
    store_without_vectors(db, 2 * BATCH)
    done: list[int] = []
    with FaultServer("slow") as fake:
        fake.delay_s = DELAY_S
        with fault_embedder(fake, timeout_s=30) as embedder:
            fill = threading.Thread(
                target=lambda: done.append(
                    Indexer(db.sessions, embedder).fill_missing("u", batch=BATCH)
                )
            )
            fill.start()
            try:
                wait_for(lambda: len(_claims(db)) == BATCH, 30, lambda: str(_claims(db)))
                tokens, live = set(_claims(db)), _live(db)
                with transaction(db.sessions) as session:  # a worker's round, meanwhile
                    taken = claimer.reclaim(session)
            finally:
                fill.join(60)
    assert len(tokens) == 1 and None not in tokens, tokens  # one token on the whole batch
    assert tokens <= live  # its lock held while the batch was in flight
    assert taken == []  # a live fill's batch is not a gone claimer's
    assert done == [2 * BATCH] and vectorless(db) == 0
    assert _claims(db) == [] and not tokens & _live(db)  # the fill let its lock go
