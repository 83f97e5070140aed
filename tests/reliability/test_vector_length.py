"""An embedding API whose first answers are wrong must not break embeddings for good.

The reviewer's fault: ``MEMSTRATA_EMBEDDING_BASE_URL``/``_MODEL`` (no ``dimensions``), and
the API's first answers cut to 8 numbers. The length used to be learned from the first
answer, so those vectors were stored and every later, correct answer was refused ("the
earlier dimension is 8") until a restart — and even then the short rows stayed, never
re-embedded. Here one runtime lives through the fault and the recovery, on the real
PostgreSQL, with the fake API of ``tests/retrieval/fault_server.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

FIXED_DIM = 64  # the API's length once it works
FAULTY = 3  # its first answers are cut short


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("short-then-ok", dim=FIXED_DIM, failures=FAULTY) as server:
        yield server


@pytest.fixture
def mem(fake: FaultServer, settings: Settings, db: Database) -> Iterator[Memstrata]:
    # What MEMSTRATA_EMBEDDING_BASE_URL / _MODEL give: a model without `dimensions`.
    configured = fake.as_api_of(settings).model_copy(
        update={"embedding_heal_interval_s": 0.05, "embedding_breaker_cooldown_s": 0.2}
    )
    runtime = Memstrata.open(configured, database=db)
    try:
        yield runtime
    finally:
        runtime.stop_background()
        runtime.pool.close()
        if runtime.embedder is not None:
            runtime.embedder.close()  # type: ignore[attr-defined]


def lengths(db: Database) -> list[int | None]:
    """Each row's stored vector length (None: no vector), oldest first."""
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT embedding_dim FROM memory_embeddings ORDER BY id"))
        return [dim for (dim,) in rows]


def turn(mem: Memstrata, index: int) -> tuple[int, int]:
    """Write one turn of alice; (rows embedded, rows stored without a vector)."""
    report = mem.indexer.index_turn("alice", "s1", index, f"alice keeps bees, note {index}", "ok")
    return report.embedded, report.embedding_failed


def vector_ranked(mem: Memstrata, query: str = "bees") -> bool:
    found = mem.search.search("alice", query)
    return found.mode == "hybrid" and any(h.explain["vector_rank"] for h in found.hits)


def test_first_answers_cut_to_8_numbers_store_no_vector_and_the_api_is_used_once_fixed(
    fake: FaultServer, mem: Memstrata, db: Database
) -> None:
    """The reviewer's repro: 8 numbers is no model's length, so those answers are refused
    (the rows are stored without a vector) instead of fixing the length; once the API
    answers right, writes and searches use it without a restart and the rows written
    during the fault get their vectors from the background worker."""
    fake.short = 8
    assert [turn(mem, i) for i in range(FAULTY)] == [(0, 1)] * FAULTY  # stored, no vector
    assert lengths(db) == [None] * FAULTY
    assert mem.embedder is not None and mem.embedder.breaker.state == "open"  # 3 refusals
    time.sleep(0.3)  # its cool-down: the next write is the probe
    assert turn(mem, FAULTY) == (1, 0)  # the API is fixed: used at once
    assert vector_ranked(mem)
    mem.start_background()
    wait_for(
        lambda: lengths(db) == [FIXED_DIM] * (FAULTY + 1),
        20,
        "the short rows re-embedded",
        every_s=0.05,
    )
    assert mem.healer is not None and mem.healer.backlog().pending == 0
    assert vector_ranked(mem)


# A search while the short vectors are stored builds the user's in-memory index with their
# length; the vectors of the replaced length that come later must replace it (the index
# takes the newest length and loads the user's rows again).
@pytest.mark.parametrize(
    "search_during_fault",
    [False, True],
    ids=["no-search-during-the-fault", "searched-during-the-fault"],
)
def test_vectors_of_a_replaced_length_are_re_embedded_without_a_restart(
    fake: FaultServer,
    mem: Memstrata,
    db: Database,
    caplog: pytest.LogCaptureFixture,
    search_during_fault: bool,
) -> None:
    """First answers cut to 48 numbers — a length a model may have, so it is learned and
    stored. Once the API answers 64 twice in a row, 64 replaces 48 (one answer alone would
    not): writes and searches work again without a restart, and the worker re-embeds the
    rows stored with 48."""
    fake.short = 48
    assert [turn(mem, i) for i in range(FAULTY)] == [(1, 0)] * FAULTY
    assert lengths(db) == [48] * FAULTY
    if search_during_fault:
        fake.failures += 1  # the query's answer is cut short too
        # Another text than the last search's: a query's vector is cached (by user, model
        # and text), and one cached now would have the replaced length too.
        assert vector_ranked(mem, "keeps bees")
    with caplog.at_level("WARNING"):
        assert turn(mem, FAULTY) == (0, 1)  # 64 once: refused, the row waits for a vector
        assert turn(mem, FAULTY + 1) == (1, 0)  # 64 again: the API's length now
    (changed,) = [
        f
        for f in map(event_fields, caplog.records)
        if f.get("event") == "embedding.dimension_changed"
    ]
    assert (changed["model"], changed["previous"], changed["dimensions"]) == ("fake-model", 48, 64)
    mem.start_background()
    wait_for(
        lambda: lengths(db) == [FIXED_DIM] * (FAULTY + 2),
        20,
        "the old rows re-embedded",
        every_s=0.05,
    )
    # The worker's own count of wrong-length rows drops once its round has finished, a
    # moment after the rows are written (it lagged past the assert on a loaded CI host).
    healer = mem.healer
    assert healer is not None
    wait_for(
        lambda: healer.backlog().pending == 0, 20, "the worker's backlog to empty", every_s=0.05
    )
    assert mem.embedder is not None and mem.embedder.breaker.state == "closed"
    assert vector_ranked(mem)
