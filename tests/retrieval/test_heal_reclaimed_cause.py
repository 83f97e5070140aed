"""The worker's take-back of a gone claimer's rows says who that claimer may have been: a
``memstrata reindex`` run claims under a lock token as a worker does (``retrieval.fill``),
so the rows a worker takes back may be a cut-off run's, not only a dead worker's.

Real PostgreSQL; the run's lock connection is ended with ``pg_terminate_backend`` (a run
cut off from its database)."""

from __future__ import annotations

import pytest

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import fill
from memstrata.retrieval.heal_claims import take_back
from memstrata.retrieval.repository import EmbeddingRepository
from tests.cli.test_reindex_held import store_without_vectors
from tests.retrieval.test_healing_claims import events, holder_of, terminate

MODEL = "fake-model"


def test_a_cut_off_reindex_runs_rows_are_taken_back_naming_a_reindex_run(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    store_without_vectors(db, 3)
    lock = fill._lock(db.sessions)  # the run's own claimer lock, as fill_missing takes it
    assert lock is not None
    try:
        token = lock.token()
        assert token is not None
        with transaction(db.sessions) as session:  # the run's batch, as _fill_free claims it
            todo, lease = EmbeddingRepository(session, "u").claim_missing(
                MODEL, 2, fill.FILL_LEASE_S, token
            )
        assert len(todo) == 2 and lease is not None and lease.claimed_by == token
        terminate(db, [holder_of(db, token)])
        with caplog.at_level("WARNING"), transaction(db.sessions) as session:
            take_back(session, MODEL, [])
    finally:
        lock.close()
    (reclaimed,) = events(caplog, "embedding.heal.reclaimed")
    assert (reclaimed["rows"], reclaimed["users"]) == (2, ["u"])
    assert reclaimed["cause"] == (
        "the process that claimed them (a worker of memstrata serve, or a memstrata reindex "
        "run) is gone: it died or stopped, or its database connection ended, before its "
        "lease ran out"
    )
