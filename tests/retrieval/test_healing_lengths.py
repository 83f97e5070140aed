"""Self-healing of vectors that cannot rank, on the real PostgreSQL: all-zero vectors,
vectors of a length no model gives or of a length the model no longer gives. The API is the
fake of ``fault_server.py``."""

from __future__ import annotations

import contextlib
import time

import pytest
from sqlalchemy import event, text

from memstrata.config import STORED_VECTOR_DIM, EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.errors import EmbeddingError
from memstrata.retrieval.embedding_answer import MIN_LEARNED_DIMENSIONS, Lengths
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.length_watch import wrong_lengths
from memstrata.retrieval.records import NewChunk

from .fault_server import FaultServer
from .healing_support import (  # noqa: F401  (pytest finds the fixture by its name)
    fault_api_as_embedder,
    vectors,
    write_turns,
)
from .stored import insert_rows

pytestmark = pytest.mark.timeout(60)


# -- vectors that cannot rank: zeros, a wrong length ----------------------------------------


def stored_lengths(db: Database) -> list[tuple[str | None, int | None]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT embedding_model, embedding_dim FROM memory_embeddings ORDER BY id")
        )
        return [(model, dim) for model, dim in rows]


def rows_with_vectors(db: Database, user: str, model: str, dim: int, n: int = 3) -> None:
    """Rows as an earlier process stored them: ``dim``-number vectors of ``model``."""
    chunks = [
        NewChunk(f"sessions/s1/{i}", 0, f"turn {i}", f"h{i}", embedding=[0.5] * dim,
                 embedding_model=model)
        for i in range(n)
    ]  # fmt: skip
    insert_rows(db, user, chunks)


def test_zero_vectors_are_not_stored_and_heal_once_the_api_answers_right(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """All-zero vectors used to be stored: having a vector, the row was never embedded
    again, and having no direction, it never ranked."""
    fault.mode = "zeros"
    write_turns(db, embedder, ["alice"])
    assert not any(has for _, _, has, _, _ in vectors(db))  # stored without a vector
    healer = VectorHealer(db.sessions, embedder)
    assert healer.backlog().pending == 3
    time.sleep(0.3)  # the breaker's cool-down
    report = healer.run_once()  # zeros for every text: the API's fault, no attempt counted
    assert (report.embedded, report.released) == (0, 3)
    assert all(attempts == 0 for *_, attempts in vectors(db))
    fault.mode = "ok"
    with db.engine.begin() as conn:  # the release has run out
        conn.execute(text("UPDATE memory_embeddings SET embedding_claimed_until = NULL"))
    time.sleep(0.3)
    assert healer.run_once().embedded == 3
    assert all(has for _, _, has, _, _ in vectors(db))


def test_rows_stored_with_a_length_no_model_gives_are_re_embedded(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """8-number vectors stored before such answers were refused (the reviewer's rows
    after a restart): they used to stay for good, not even counted as pending."""
    rows_with_vectors(db, "alice", "fake-model", 8)
    rows_with_vectors(db, "bob", "fake-model", 32, n=1)  # the right length: left alone
    assert embedder.dimensions is None  # a new process: no answer yet
    report = VectorHealer(db.sessions, embedder).run_once()
    assert (report.claimed, report.embedded) == (3, 3)
    assert sorted(stored_lengths(db), key=str) == [("fake-model", 32)] * 4


def test_a_configured_length_re_embeds_every_other_length(db: Database, fault: FaultServer) -> None:
    rows_with_vectors(db, "alice", "fake-model", 40)
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url, dimensions=32)
    with OpenAICompatibleEmbedder(spec, max_retries=0) as configured:
        assert VectorHealer(db.sessions, configured).run_once().embedded == 3
    assert stored_lengths(db) == [("fake-model", 32)] * 3


def test_a_learned_length_leaves_rows_of_another_plausible_length_alone(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """A restart while the API cuts vectors to 32 numbers learns 32: that must not turn
    every stored 40-number vector into a cut one. Once the API answers 40 again (twice),
    the rows stored with 32 meanwhile are the ones re-embedded."""
    rows_with_vectors(db, "alice", "fake-model", 40)
    embedder.embed(["learn"], "passage")  # 32, from the faulty API
    healer = VectorHealer(db.sessions, embedder)
    assert healer.run_once().claimed == 0
    rows_with_vectors(db, "bob", "fake-model", 32, n=2)  # written during the fault
    fault.dim = 40
    for _ in range(2):
        with contextlib.suppress(EmbeddingError):  # the first 40: refused once
            embedder.embed(["again"], "passage")
    assert embedder.lengths.replaced == frozenset({32})
    assert healer.run_once().embedded == 2
    assert stored_lengths(db) == [("fake-model", 40)] * 5


def test_rows_of_a_wrong_length_are_looked_for_once_per_length(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """Finding them reads the table (no index covers the length): once per process and
    length, not on every round."""
    scans: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "embedding_queue.users" in statement and "embedding_dim <" in statement:
            scans.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        embedder.embed(["learn"], "passage")  # 32
        healer = VectorHealer(db.sessions, embedder)
        for _ in range(3):
            healer.run_once()
        assert len(scans) == 1
        fault.dim = 40
        for _ in range(2):
            with contextlib.suppress(EmbeddingError):  # the first 40: refused once
                embedder.embed(["again"], "passage")
        for _ in range(3):
            healer.run_once()
        assert len(scans) == 2  # the length changed: one more look
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def test_wrong_lengths_rule() -> None:
    assert wrong_lengths(Lengths(None)).params() == {
        "below": MIN_LEARNED_DIMENSIONS,
        "above": STORED_VECTOR_DIM,
        "stale": [],
    }
    replaced = Lengths(384, replaced=frozenset({48, 768}))
    assert wrong_lengths(replaced).stale == (48, 768)
    assert wrong_lengths(Lengths(16, configured=True)).params() == {
        "below": 16,
        "above": 16,
        "stale": [],
    }
